-- Start a workflow: its first jobs, the records of its later steps, its chord states and
-- its own record, in one step (taskq/flow.py builds the ops).
-- KEYS: every key the ops touch.  ARGV: the ops (msgpack).
run_ops(cmsgpack.unpack(ARGV[1]), now_ms())
return 1
