-- 0001: mark the keyspace as specgate's, with the time it was first migrated.
-- Idempotent: SETNX keeps the first time.
local t = redis.call('TIME')
redis.call('SETNX', prefix .. 'schema:created', t[1])
