-- 0002: build the tenant index set from the tenant records, for keyspaces
-- written before the index existed. Idempotent: SADD of present ids.
local cursor = '0'
repeat
  local res = redis.call('SCAN', cursor, 'MATCH', prefix .. 'tenant:*', 'COUNT', 1000)
  cursor = res[1]
  for _, key in ipairs(res[2]) do
    if redis.call('TYPE', key).ok == 'string' then
      redis.call('SADD', prefix .. 'tenants', string.sub(key, #prefix + 8))
    end
  end
until cursor == '0'
