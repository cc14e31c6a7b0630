//! JSON read strictly: a key twice in one object, or a number too large
//! for a 64-bit float (`1e400`), is an error naming where it is, not a
//! value silently chosen (serde_json keeps the last of duplicate keys and
//! turns `1e400` into `1e+400`, a number no reader can hold).
//!
//! [`StrictValue`] is a [`DeserializeSeed`] producing a
//! [`serde_json::Value`], so it reads from any serde_json deserializer:
//! one NDJSON line, or the elements of a JP array one by one.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Reads one JSON value strictly (see the module documentation). Errors
/// name the path to the problem, as `arguments.items[3].a`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        At { path: None }.deserialize(deserializer)
    }
}

/// Parses `text` as one strict JSON value.
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictValue.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Where in the value the reader is: `None` at the top.
struct At<'p> {
    path: Option<&'p Path<'p>>,
}

/// A path as a linked list up to the top, so that descending costs no
/// allocation: a key or an index under a parent.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Path<'p> {
    parent: Option<&'p Path<'p>>,
    step: Step<'p>,
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parent) = self.parent {
            write!(f, "{parent}")?;
        }
        match &self.step {
            Step::Key(key) if self.parent.is_none() => write!(f, "{key}"),
            Step::Key(key) => write!(f, ".{key}"),
            Step::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl At<'_> {
    fn describe(&self) -> String {
        match self.path {
            Some(path) => format!("field `{path}`: "),
            None => String::new(),
        }
    }
}

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for At<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{}a number is out of range", self.describe())))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = Path {
                parent: self.path,
                step: Step::Index(items.len()),
            };
            match seq.next_element_seed(At { path: Some(&path) })? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<KeyOrNumber>()? {
            let key = match key {
                KeyOrNumber::Key(key) => key,
                // serde_json with arbitrary precision hands a number as a
                // map with one magic key: read it back as a number.
                KeyOrNumber::Number => {
                    let text: String = access.next_value()?;
                    let number: Number = text.parse().map_err(de::Error::custom)?;
                    if number.as_f64().is_none_or(f64::is_infinite) {
                        return Err(de::Error::custom(format!(
                            "{}a number is out of range (JSON numbers must fit a 64-bit float)",
                            self.describe()
                        )));
                    }
                    return Ok(Value::Number(number));
                }
            };
            let path = Path {
                parent: self.path,
                step: Step::Key(&key),
            };
            if map.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "field `{path}`: the key appears twice in one object"
                )));
            }
            let value = access.next_value_seed(At { path: Some(&path) })?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

/// serde_json's private key for an arbitrary-precision number.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// A map key, or the mark of an arbitrary-precision number.
enum KeyOrNumber {
    Key(String),
    Number,
}

impl<'de> de::Deserialize<'de> for KeyOrNumber {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyOrNumber, E> {
                Ok(if v == NUMBER_TOKEN {
                    KeyOrNumber::Number
                } else {
                    KeyOrNumber::Key(v.to_owned())
                })
            }
            fn visit_string<E>(self, v: String) -> Result<KeyOrNumber, E> {
                Ok(if v == NUMBER_TOKEN {
                    KeyOrNumber::Number
                } else {
                    KeyOrNumber::Key(v)
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_named_with_their_path() {
        let e = from_str(r#"{"type":"user","type":"assistant"}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("field `type`: the key appears twice"),
            "{e}"
        );
        let e = from_str(r#"{"a":{"b":[1,{"c":1,"c":2}]}}"#).unwrap_err();
        assert!(e.to_string().contains("field `a.b[1].c`"), "{e}");
    }

    #[test]
    fn numbers_are_kept_or_refused_when_out_of_range() {
        let v = from_str(r#"{"big":12345678901234567890123,"f":0.10,"n":-0}"#).unwrap();
        assert_eq!(
            v.to_string(),
            r#"{"big":12345678901234567890123,"f":0.10,"n":-0}"#
        );
        let e = from_str(r#"{"x":[1e400]}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("field `x[0]`: a number is out of range"),
            "{e}"
        );
        assert!(from_str("-1e309").is_err());
        assert!(from_str("1e308").is_ok());
    }

    #[test]
    fn it_reads_what_serde_json_reads() {
        for text in [
            r#"{"a":[1,2.5,"s",null,true,{"b":{}}],"c":[]}"#,
            "[]",
            "\"x\"",
            "0",
        ] {
            let strict = from_str(text).unwrap();
            let plain: Value = serde_json::from_str(text).unwrap();
            assert_eq!(strict, plain, "{text}");
        }
        assert!(from_str("{} x").is_err());
    }
}
