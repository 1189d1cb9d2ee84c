import json,glob,sys
for f in sorted(glob.glob('/tmp/hf-oracle/work/res/hfcheck_*.json')):
    d=json.load(open(f))
    for k,r in d.items():
        if k=='name': continue
        if 'error' in r: print(d['name'],k,'ERROR',r['error'][-600:]); continue
        cmps={c:(r[c]['equal'],r[c]['compared'],r[c]['params_with_nan'],r[c]['differ'][:2]) for c in r if c.startswith('vs_')}
        print(d['name'],k,r['class'],len(r['files']),'info',r['loading_info'],cmps,r['trainer_loading_info'])
