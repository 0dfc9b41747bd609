--@include "lib/layout"
--@include "lib/pack_number"

-- pack_task(t): task `t`'s state packed in the layout lib/parse_task reads
-- (STATE_FIELDS in order, joined by '|'; nil packs as ''), also kept as
-- `t.saved` so a reply can carry the state without reading it back.
-- scripts.py writes the function here from threadmill_redis.keys.STATE_LAYOUT.
--@pack_task
