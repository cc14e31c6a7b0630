-- convstore schema, version 1.
--
-- Every table that grows with a conversation has conversation_id first in
-- its primary key: each can be distributed by it (Citus), and the rows of
-- one conversation are found by one index range. Values are convstore's
-- own encodings (bincode, blake3-chained records); bytea values are
-- TOASTed, compressed with lz4 where the server has it.

-- The database as a whole: its format version, and settings.
CREATE TABLE settings (key bytea PRIMARY KEY, value bytea NOT NULL);
-- Conversation names: name (UTF-8) -> conversation id.
CREATE TABLE names (key bytea PRIMARY KEY, value bytea NOT NULL);
-- Long texts, stored once, by blake3 hash.
CREATE TABLE blobs (key bytea PRIMARY KEY, value bytea NOT NULL);
-- A conversation's metadata: name, creation time, head, length, turn state, counts per kind.
CREATE TABLE conversations (conversation_id bytea PRIMARY KEY, value bytea NOT NULL);
-- Where the conversation's staged records start.
CREATE TABLE staging (conversation_id bytea PRIMARY KEY, value bytea NOT NULL);
-- Turn ranges automatic compaction never covers.
CREATE TABLE pins (conversation_id bytea PRIMARY KEY, value bytea NOT NULL);
-- Automatic compaction's state.
CREATE TABLE auto_state (conversation_id bytea PRIMARY KEY, value bytea NOT NULL);
-- A fork's parent, fork point and base address.
CREATE TABLE lineage (conversation_id bytea PRIMARY KEY, value bytea NOT NULL);
-- An append's idempotency key (key: blake3 of it): the request's fingerprint and what it stored.
CREATE TABLE idempotency_keys (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A chunk of up to 1,024 records (key: first seq, 8 bytes big-endian).
CREATE TABLE chunks (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- The turn index: a chunk's last turn and first seq.
CREATE TABLE turns (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A chunk's tool calls: (seq, id, name).
CREATE TABLE calls (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A chunk's compactions: (seq, turn, record).
CREATE TABLE overlay_directories (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- Formats 1 to 3: a compaction each (not written by format 4).
CREATE TABLE overlays (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- Small appends staged until they are settled into a chunk.
CREATE TABLE staged_chunks (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- The turn index of staged chunks.
CREATE TABLE staged_turns (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- The tool calls of staged chunks.
CREATE TABLE staged_calls (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- The compactions of staged chunks.
CREATE TABLE staged_overlays (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A materialized view's state (key: 8 bytes of its name's hash).
CREATE TABLE views (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A block of a view's events (key: view, first turn).
CREATE TABLE view_blocks (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- A view's call index (key: view, bucket).
CREATE TABLE view_calls (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);

-- lz4 decompresses several times faster than the default pglz; a server
-- built without it keeps pglz.
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['blobs', 'chunks', 'staged_chunks', 'view_blocks', 'overlay_directories'] LOOP
        BEGIN
            EXECUTE format('ALTER TABLE %I ALTER COLUMN value SET COMPRESSION lz4', t);
        EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
            NULL;
        END;
    END LOOP;
END
$$;
