// A fake S3 server for the tests and bench/remote.py: s3rver on a free loopback port, with one
// JSON line per request in LOG: what the client asked for and how many body bytes were written to
// it (an aborted range GET counts what was sent before the client hung up, not the range asked).
//
//   node tests/s3/server.js DIR LOG [BUCKET [PORT]]    prints "port N" on stdout once it listens
//
// PORT (default: a free one) starts it again where a client already points (an outage that ends).
//
// s3rver's own log rounds sizes ("6.67kb") and omits the method, so it cannot be summed.
'use strict';
const fs = require('fs');
const S3rver = require('s3rver');

const [dir, log, bucket = 'ckpt', port = '0'] = process.argv.slice(2);
if (!dir || !log) {
  process.stderr.write('usage: node server.js DIR LOG [BUCKET [PORT]]\n');
  process.exit(2);
}
const out = fs.openSync(log, 'a');

function counted(req, res) {
  let sent = 0;
  const write = res.write;
  const end = res.end;
  res.write = function (chunk, ...rest) {
    if (chunk && typeof chunk !== 'function') sent += Buffer.byteLength(chunk);
    return write.call(this, chunk, ...rest);
  };
  res.end = function (chunk, ...rest) {
    if (chunk && typeof chunk !== 'function') sent += Buffer.byteLength(chunk);
    return end.call(this, chunk, ...rest);
  };
  res.on('close', () => {
    const line = {
      t: Date.now() / 1000,
      method: req.method,
      url: req.url,
      range: req.headers.range || null,
      agent: req.headers['user-agent'] || null,
      status: res.statusCode,
      length: Number(res.getHeader('content-length') || 0),
      sent,
      complete: res.writableFinished,
    };
    fs.writeSync(out, JSON.stringify(line) + '\n');
  });
}

const server = new S3rver({
  directory: dir,
  address: '127.0.0.1',
  port: Number(port),
  silent: true,
  configureBuckets: [{ name: bucket }],
});
server.run().then(
  (addr) => {
    server.httpServer.prependListener('request', counted);
    process.stdout.write(`port ${addr.port}\n`);
  },
  (err) => {
    process.stderr.write(`s3rver: ${err.stack || err}\n`);
    process.exit(1);
  },
);
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
