-- convstore schema, version 2: compactions filed by turn range (store
-- format 5), so that the compactions meeting some turns are found without
-- reading the others. A database of format 4 leaves the table empty and
-- keeps reading every compaction.

-- Key: level (1 byte), bucket (8 bytes big-endian), seq (8 bytes
-- big-endian); value: the compaction's turns, turn and record.
CREATE TABLE overlay_ranges (
    conversation_id bytea NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
