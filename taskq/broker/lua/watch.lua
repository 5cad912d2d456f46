-- A waiter's look at a job's record (job.result(), taskq job --wait): the record, with the
-- waiter registered in it (field 'waited') while the job has not ended, because the script
-- that ends a job pushes onto its done list only when someone waits (finish_record). Both in
-- one step: an end before this call is in the record returned, an end after it wakes the
-- waiter's BLMOVE. A record that is gone is not brought back.
-- KEYS: the record. Returns its HGETALL (empty: there is none).
local state = redis.call('HGET', KEYS[1], 'state')
if state and not FINAL[state] then redis.call('HSET', KEYS[1], 'waited', '1') end
return redis.call('HGETALL', KEYS[1])
