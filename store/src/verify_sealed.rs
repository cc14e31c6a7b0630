//! `verify` of an encrypted database without its key
//! ([`Store::verify_sealed`]).

use crate::backend::encrypted::{is_chunk_key, sealed_by};
use crate::backend::{prefixed, Keyspace};
use crate::crypto::{ChunkHeader, Sealed};
use crate::error::{StoreError, StoreResult};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::store::Store;

/// What [`Store::verify_sealed`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealedReport {
    /// Conversations whose chains were checked.
    pub conversations: u64,
    /// Records their chunks hold, counted from the chunks' headers.
    pub records: u64,
    /// Sealed chunks read.
    pub chunks: u64,
    /// Sealed values checked against their checksums (chunks included).
    pub values: u64,
}

/// The first problem [`Store::verify_sealed`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedFailure {
    /// The conversation.
    pub conversation: ConversationId,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for SealedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(
                f,
                "conversation \"{}\" ({}): {}",
                crate::one_line(name),
                self.conversation.short(),
                self.problem
            ),
            None => write!(f, "conversation {}: {}", self.conversation, self.problem),
        }
    }
}

impl Store {
    /// Checks an encrypted database without its key: each conversation's
    /// sealed chunks, by the headers they carry in clear, hold its records
    /// in order, each starting at the address the one before ends at,
    /// from its fork point's (or the root) to its head; and every sealed
    /// value of it (chunks, directories, views) matches its checksum.
    /// What it cannot check without the key is that a record's plaintext
    /// hashes to its address: `verify` with the key does. `id`: that
    /// conversation and those it was forked from; `None`: all.
    pub fn verify_sealed(
        &self,
        id: Option<&ConversationId>,
    ) -> StoreResult<Result<SealedReport, SealedFailure>> {
        let Some(sealed) = self.sealed() else {
            return Err(StoreError::Encrypted {
                what: "the database is not encrypted".to_owned(),
            });
        };
        let raw = sealed.raw();
        let mut todo = Vec::new();
        match id {
            Some(id) => {
                let mut next = Some(*id);
                while let Some(id) = next {
                    todo.push(id);
                    next = self.fork_point(&id)?.map(|p| p.parent);
                }
            }
            None => todo.extend(self.conversations()?.into_iter().map(|c| c.id)),
        }
        let mut report = SealedReport::default();
        for id in todo {
            let info = self.info(&id)?;
            let fail = |problem: String| SealedFailure {
                conversation: id,
                name: info.name.clone(),
                problem,
            };
            let (mut next, mut parent) = info.fork.map_or((0, Address::ROOT), |p| (p.at, p.base));
            let pin = self.pin_read();
            let settled = self.settled(&id, &pin)?;
            for space in [Space::Settled, Space::Staged] {
                for pair in raw.scan(Keyspace::Main, prefixed(keys::chunks(space, &id)), false) {
                    let (key, value) = pair?;
                    let first = keys::key_seq(&key).unwrap_or(u64::MAX);
                    if Store::space_of(first, settled) != space {
                        continue;
                    }
                    report.chunks += 1;
                    report.values += 1;
                    let header = Sealed::parse(&value)
                        .filter(Sealed::intact)
                        .and_then(|s| ChunkHeader::parse(s.header));
                    let Some(header) = header else {
                        return Ok(Err(fail(format!(
                            "chunk at seq {first}: not sealed, or its ciphertext does not \
                             match its checksum"
                        ))));
                    };
                    if first != next {
                        return Ok(Err(fail(format!(
                            "chunk at seq {first}: expected one at seq {next}"
                        ))));
                    }
                    if header.parent != *parent.as_bytes() {
                        return Ok(Err(fail(format!(
                            "chunk at seq {first}: it does not start where the record before \
                             it ends"
                        ))));
                    }
                    parent = Address::from_bytes(header.last);
                    next += header.records;
                    report.records += header.records;
                }
            }
            if next != info.len {
                return Ok(Err(fail(format!(
                    "its chunks hold records up to seq {next}, its length is {}",
                    info.len
                ))));
            }
            if parent != info.head {
                return Ok(Err(fail(
                    "its last chunk does not end at its head".to_owned(),
                )));
            }
            for tag in keys::CONVERSATION_TAGS {
                let mut prefix = vec![*tag];
                prefix.extend_from_slice(id.as_bytes());
                if sealed_by(&prefix).is_none() || is_chunk_key(&prefix) {
                    continue;
                }
                for pair in raw.scan(Keyspace::Main, prefixed(prefix), false) {
                    let (key, value) = pair?;
                    report.values += 1;
                    if !Sealed::parse(&value).is_some_and(|s| s.intact()) {
                        return Ok(Err(fail(format!(
                            "the value of key {}: not sealed, or its ciphertext does not match \
                             its checksum",
                            char::from(key[0])
                        ))));
                    }
                }
            }
            report.conversations += 1;
        }
        Ok(Ok(report))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::{Backend, Batch, MemoryBackend};
    use crate::{json, AppendOptions, Keyring, Store, Timestamp};

    use super::*;

    /// An encrypted store in memory, its keyring in `dir`.
    fn sealed_store(dir: &std::path::Path) -> Store {
        let key = dir.join("master.key");
        Keyring::generate(&key).unwrap();
        let keyring = Keyring::open(&key).unwrap();
        let memory = Arc::new(MemoryBackend::new());
        let mut batch = Batch::new();
        batch.put(keys::FORMAT, crate::FORMAT_VERSION.to_be_bytes().to_vec());
        batch.put(keys::ENCRYPTION, [keyring.check(), [7; 16]].concat());
        memory.apply(batch).unwrap();
        Store::assemble_sealed(memory, crate::FORMAT_VERSION, Some(keyring), [7; 16])
    }

    fn events(texts: &[&str]) -> Vec<crate::Event> {
        let now = Timestamp::now();
        texts
            .iter()
            .map(|t| json::parse_event(&format!(r#"{{"type":"user","text":"{t}"}}"#), now).unwrap())
            .collect()
    }

    /// The raw (sealed) chunk keys and values of `id`.
    fn raw_chunks(store: &Store, id: &ConversationId) -> Vec<(Bytes, Bytes)> {
        let raw = store.sealed().unwrap().raw();
        let mut out = Vec::new();
        for space in [Space::Settled, Space::Staged] {
            for pair in raw.scan(Keyspace::Main, prefixed(keys::chunks(space, id)), false) {
                out.push(pair.unwrap());
            }
        }
        out
    }

    use crate::backend::Bytes;

    #[test]
    fn a_sealed_log_verifies_without_its_key_and_damage_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = sealed_store(dir.path());
        let (id, _) = store
            .create_and_append(
                Some("a"),
                &events(&["one", "two"]),
                &AppendOptions::default(),
            )
            .unwrap();
        store
            .append(&id, &events(&["three"]), &AppendOptions::default())
            .unwrap();
        let report = store.verify_sealed(None).unwrap().unwrap();
        assert_eq!((report.conversations, report.records), (1, 3));
        // No text in clear.
        let raw = raw_chunks(&store, &id);
        assert!(raw.iter().all(|(_, v)| !v.windows(3).any(|w| w == b"two")));

        // A flipped bit in a sealed chunk: found without the key (its
        // checksum) and with it (it does not open).
        let (key, value) = raw.last().unwrap().clone();
        let mut flipped = value.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let sealed = store.sealed().unwrap();
        let mut batch = Batch::new();
        batch.put(key.to_vec(), flipped);
        sealed.raw().apply(batch).unwrap();
        let failure = store.verify_sealed(None).unwrap().unwrap_err();
        assert!(failure.problem.contains("checksum"), "{failure}");
        assert!(store.verify(&id).is_err() || store.verify(&id).unwrap().is_err());

        // A chunk removed: the chain of headers breaks.
        let mut batch = Batch::new();
        batch.put(key.to_vec(), value.to_vec());
        sealed.raw().apply(batch).unwrap();
        assert!(store.verify_sealed(None).unwrap().is_ok());
        let (first, _) = raw[0].clone();
        let mut batch = Batch::new();
        batch.delete(first.to_vec());
        sealed.raw().apply(batch).unwrap();
        let failure = store.verify_sealed(None).unwrap().unwrap_err();
        assert!(
            failure.problem.contains("expected one at seq 0"),
            "{failure}"
        );
    }

    #[test]
    fn a_sealed_value_does_not_open_under_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = sealed_store(dir.path());
        let (id, _) = store
            .create_and_append(Some("a"), &events(&["x"]), &AppendOptions::default())
            .unwrap();
        store
            .append(&id, &events(&["y"]), &AppendOptions::default())
            .unwrap();
        let raw = raw_chunks(&store, &id);
        assert!(raw.len() >= 2, "{}", raw.len());
        // The second chunk's value under the first chunk's key.
        let sealed = store.sealed().unwrap();
        let mut batch = Batch::new();
        batch.put(raw[0].0.to_vec(), raw[1].1.to_vec());
        sealed.raw().apply(batch).unwrap();
        let read: Result<Vec<_>, _> = match store.scan(&id, 0..2) {
            Ok(records) => records.collect(),
            Err(e) => Err(e),
        };
        let error = read.unwrap_err().to_string();
        assert!(error.contains("does not open"), "{error}");
    }
}
