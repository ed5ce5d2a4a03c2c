-- fencekeeper 009: the lock kinds read, write and permit. A fence may be
-- bound to a read lock, a write lock or one slot of a semaphore (a permit's
-- sequencer names '<name>#<slot>') as well as to a lock or an election: the
-- kind is part of which lock a binding names, so widen the check.
ALTER TABLE fencekeeper_fence_bindings DROP CONSTRAINT IF EXISTS fencekeeper_fence_bindings_kind_check;
ALTER TABLE fencekeeper_fence_bindings ADD CONSTRAINT fencekeeper_fence_bindings_kind_check CHECK (kind IN ('lock', 'election', 'read', 'write', 'permit'));
ALTER TABLE fencekeeper_table_bindings DROP CONSTRAINT IF EXISTS fencekeeper_table_bindings_kind_check;
ALTER TABLE fencekeeper_table_bindings ADD CONSTRAINT fencekeeper_table_bindings_kind_check CHECK (kind IN ('lock', 'election', 'read', 'write', 'permit'));
