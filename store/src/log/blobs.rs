//! Long texts, stored once by content hash.

use crate::backend::Keyspace;
use crate::codec::{self, BlobRef, BlobValue};
use crate::error::{StoreError, StoreResult};
use crate::hash::BlobHash;
use crate::store::Store;

impl Store {
    /// The text of a blob.
    pub(crate) fn load_blob(&self, blob: BlobRef) -> StoreResult<String> {
        let bytes = self
            .blob_bytes(&blob.hash)?
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("blob {} is missing", blob.hash),
            })?;
        String::from_utf8(bytes).map_err(|_| StoreError::Corrupt {
            what: format!("blob {} is not UTF-8", blob.hash),
        })
    }

    /// The stored bytes of the blob with this hash, if it is stored (read
    /// from its segment file, checked against the file's checksum; not
    /// against `hash`).
    pub(crate) fn blob_bytes(&self, hash: &BlobHash) -> StoreResult<Option<Vec<u8>>> {
        let Some(value) = self.kv.get(Keyspace::Blobs, hash.as_bytes())? else {
            return Ok(None);
        };
        if self.format < 2 {
            return Ok(Some(value.to_vec()));
        }
        let what = format!("blob {hash}");
        match codec::decode(&value, &what)? {
            BlobValue::Inline(bytes) => Ok(Some(bytes.to_vec())),
            BlobValue::Segment(at) => match self.segments() {
                Some(segments) => segments.read(&at, &|| what.clone()).map(Some),
                None => Err(StoreError::Corrupt {
                    what: format!("{what}: refers to segment files this database does not have"),
                }),
            },
        }
    }
}
