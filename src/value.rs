//! [`Value`]: the dynamic value type of agent variables, metadata and tool arguments.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A dynamically typed value (variables, metadata, structured message data).
///
/// Converts losslessly to and from `serde_json::Value` where JSON can express it:
/// [`Value::Bytes`] and non-finite floats have no JSON form (`TryFrom` fails), and JSON
/// integers beyond `i64` become [`Value::Float`].
///
/// ```
/// use agentwal::Value;
/// let v = Value::from(serde_json::json!({"n": 3, "tags": ["a", "b"]}));
/// assert_eq!(serde_json::Value::try_from(v.clone()).unwrap()["n"], 3);
/// assert_eq!(Value::from(3i64), Value::Int(3));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub enum Value {
    /// No value.
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A UTF-8 string.
    Str(String),
    /// Raw bytes.
    // As one byte string: the same postcard bytes as a sequence of u8, but encoded and
    // decoded in one copy instead of one serde call per byte.
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A map with string keys, ordered.
    Map(#[serde(deserialize_with = "crate::sorted_map::deserialize")] BTreeMap<String, Value>),
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::Int(i64::from(v))
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(f64::from(v))
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Self {
        Value::List(v)
    }
}
impl From<BTreeMap<String, Value>> for Value {
    fn from(v: BTreeMap<String, Value>) -> Self {
        Value::Map(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        use serde_json::Value as J;
        match v {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Value::Str(s),
            J::Array(a) => Value::List(a.into_iter().map(Value::from).collect()),
            J::Object(o) => Value::Map(o.into_iter().map(|(k, v)| (k, Value::from(v))).collect()),
        }
    }
}

/// Why a [`Value`] has no JSON form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotJson {
    /// Raw bytes have no JSON type.
    #[error("bytes have no JSON form")]
    Bytes,
    /// NaN and infinities have no JSON form.
    #[error("non-finite float has no JSON form")]
    NonFiniteFloat,
}

impl TryFrom<Value> for serde_json::Value {
    type Error = NotJson;
    fn try_from(v: Value) -> Result<Self, NotJson> {
        use serde_json::Value as J;
        Ok(match v {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(b),
            Value::Int(i) => J::from(i),
            Value::Float(f) => serde_json::Number::from_f64(f)
                .map(J::Number)
                .ok_or(NotJson::NonFiniteFloat)?,
            Value::Str(s) => J::String(s),
            Value::Bytes(_) => return Err(NotJson::Bytes),
            Value::List(l) => J::Array(l.into_iter().map(J::try_from).collect::<Result<_, _>>()?),
            Value::Map(m) => J::Object(
                m.into_iter()
                    .map(|(k, v)| Ok((k, J::try_from(v)?)))
                    .collect::<Result<_, NotJson>>()?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Value` as it was derived before `Bytes` went through `serde_bytes`.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum SeqValue {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
        Bytes(Vec<u8>),
        List(Vec<SeqValue>),
        Map(BTreeMap<String, SeqValue>),
    }

    #[test]
    fn bytes_keep_the_postcard_and_json_forms_of_a_u8_sequence() {
        // serde_bytes only speeds encoding and decoding up: stored states and deltas written
        // before it decode the same, and those written after it decode with the old type.
        let body: Vec<u8> = (0..300u16).map(|i| (i % 251) as u8).collect();
        let new = Value::List(vec![Value::Bytes(body.clone()), Value::Str("x".into())]);
        let old = SeqValue::List(vec![SeqValue::Bytes(body), SeqValue::Str("x".into())]);
        let new_bytes = postcard::to_allocvec(&new).unwrap();
        assert_eq!(new_bytes, postcard::to_allocvec(&old).unwrap());
        assert_eq!(postcard::from_bytes::<Value>(&new_bytes).unwrap(), new);
        assert_eq!(postcard::from_bytes::<SeqValue>(&new_bytes).unwrap(), old);
        let json = serde_json::to_string(&new).unwrap();
        assert_eq!(json, serde_json::to_string(&old).unwrap());
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), new);
    }

    #[test]
    fn json_round_trip_is_lossless() {
        let j = serde_json::json!({"a": [1, -2, 3.5, "x", null, true], "b": {"c": i64::MIN}});
        let v = Value::from(j.clone());
        assert_eq!(serde_json::Value::try_from(v).unwrap(), j);
    }

    #[test]
    fn bytes_and_nan_have_no_json_form() {
        assert_eq!(
            serde_json::Value::try_from(Value::Bytes(vec![1])),
            Err(NotJson::Bytes)
        );
        assert_eq!(
            serde_json::Value::try_from(Value::Float(f64::NAN)),
            Err(NotJson::NonFiniteFloat)
        );
    }
}
