import sys, torch.distributed.checkpoint as dcp
a = set(dcp.FileSystemReader(sys.argv[1]).read_metadata().state_dict_metadata)
b = set(dcp.FileSystemReader(sys.argv[2]).read_metadata().state_dict_metadata)
print("only in", sys.argv[1], sorted(a - b))
print("only in", sys.argv[2], len(b - a), sorted(b - a)[:6], "...")
