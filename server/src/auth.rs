//! Bearer tokens: a token file, read-only and read-write scopes.
//!
//! The file has one token a line, after its scope: `read-only TOKEN` or
//! `read-write TOKEN` (`ro`, `rw` for short); blank lines and lines
//! starting with `#` are skipped. A token is 16 to 4096 printable ASCII
//! characters without spaces. Only the tokens' BLAKE3 hashes are kept,
//! and a presented token is compared by its hash (constant time).

use std::path::Path;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Reads: GET requests (reading a materialized view refreshes it).
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
}

/// The tokens a server accepts.
#[derive(Clone)]
pub struct Tokens {
    hashes: Vec<(blake3::Hash, Scope)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} tokens)", self.hashes.len())
    }
}

/// The shortest token accepted.
pub const MIN_TOKEN_CHARS: usize = 16;

impl Tokens {
    /// Reads a token file; an error names the file and the line.
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads the text of a token file.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut hashes = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("line {}", i + 1);
            let (scope, token) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("{at}: expected `read-only TOKEN` or `read-write TOKEN`"))?;
            let scope = match scope {
                "read-only" | "ro" => Scope::ReadOnly,
                "read-write" | "rw" => Scope::ReadWrite,
                other => {
                    return Err(format!(
                        "{at}: unknown scope \"{other}\" (read-only or read-write)"
                    ))
                }
            };
            let token = token.trim();
            if token.len() < MIN_TOKEN_CHARS || token.len() > 4096 {
                return Err(format!(
                    "{at}: a token is {MIN_TOKEN_CHARS} to 4096 characters (this one has {})",
                    token.len()
                ));
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("{at}: a token is printable ASCII without spaces"));
            }
            hashes.push((blake3::hash(token.as_bytes()), scope));
        }
        if hashes.is_empty() {
            return Err("no token in the file".to_owned());
        }
        Ok(Tokens { hashes })
    }

    /// The scope of the token a request presents (`Authorization: Bearer
    /// TOKEN`), or why it has none: no token, or one not valid.
    pub fn presented(&self, headers: &axum::http::HeaderMap) -> Result<Scope, &'static str> {
        // The scheme's name is case-insensitive (RFC 7235).
        let token = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or(crate::TOKEN_NEEDED)?;
        self.scope(token).ok_or(crate::TOKEN_NOT_VALID)
    }

    /// The scope of a presented token, if it is one of ours.
    pub fn scope(&self, token: &str) -> Option<Scope> {
        let presented = blake3::hash(token.as_bytes());
        // blake3::Hash compares in constant time; every entry is compared.
        let mut found = None;
        for (hash, scope) in &self.hashes {
            if *hash == presented {
                found = found.max(Some(*scope));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_and_errors() {
        let tokens =
            Tokens::parse("# tokens\nread-only aaaaaaaaaaaaaaaa\n\nrw bbbbbbbbbbbbbbbbbbbb\n")
                .expect("parses");
        assert_eq!(tokens.scope("aaaaaaaaaaaaaaaa"), Some(Scope::ReadOnly));
        assert_eq!(tokens.scope("bbbbbbbbbbbbbbbbbbbb"), Some(Scope::ReadWrite));
        assert_eq!(tokens.scope("cccccccccccccccc"), None);
        assert!(Tokens::parse("admin aaaaaaaaaaaaaaaa")
            .unwrap_err()
            .contains("unknown scope"));
        assert!(Tokens::parse("ro short")
            .unwrap_err()
            .contains("16 to 4096"));
        assert!(Tokens::parse("# nothing\n")
            .unwrap_err()
            .contains("no token"));
        assert!(Tokens::parse("justatokenwithoutscope")
            .unwrap_err()
            .contains("line 1"));
    }
}
