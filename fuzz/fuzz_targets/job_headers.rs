//! The job API's request headers: any bytes as a request head, parsed as
//! hyper parses it (httparse, the job API's 64 header fields, names and
//! values as `http` takes them), then the `Idempotency-Key` check of
//! `POST /jobs`. Besides "no panic": a key is taken exactly when one header
//! carries 1-200 bytes of visible ASCII, and it is that value, unchanged;
//! every refusal names its reason (missing, repeated with its count, empty,
//! too long with its length, or the first bad byte and its offset), in a
//! bounded message that depends on that reason alone (the same key with
//! its other bytes replaced gets the same answer: nothing of it is echoed). Cost: the check of a head
//! at the job API's 16 KiB limit takes under 2 ms (the fastest of five
//! repetitions, so a loaded machine does not trip it).
#![no_main]

use std::time::{Duration, Instant};

use gatehouse_supervisor::jobs::api::{idempotency_key, KeyError, MAX_IDEMPOTENCY_KEY};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// The job API's bounds on a request head.
const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// What the check must say, worked out from the raw header lines.
fn expected(values: &[&[u8]]) -> Result<Vec<u8>, KeyError> {
    match values {
        [] => Err(KeyError::Missing),
        [one] => {
            if one.is_empty() {
                Err(KeyError::Empty)
            } else if one.len() > MAX_IDEMPOTENCY_KEY {
                Err(KeyError::TooLong(one.len()))
            } else if let Some(at) = one.iter().position(|b| !b.is_ascii_graphic()) {
                Err(KeyError::Invalid { at, byte: one[at] })
            } else {
                Ok(one.to_vec())
            }
        }
        more => Err(KeyError::Repeated(more.len())),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_HEAD_BYTES {
        return;
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(data) else {
        return;
    };
    // hyper answers 400 for a name or value `http` does not take.
    let mut map = HeaderMap::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    for h in req.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return;
        };
        if name == "idempotency-key" {
            keys.push(h.value);
        }
        map.append(name, value);
    }

    let mut fastest = Duration::MAX;
    let mut decided = None;
    for _ in 0..5 {
        let started = Instant::now();
        let got = idempotency_key(&map).map(|k| k.as_bytes().to_vec());
        fastest = fastest.min(started.elapsed());
        if let Some(before) = &decided {
            assert_eq!(before, &got, "the check is not a function of the headers");
        }
        decided = Some(got);
    }
    let got = decided.unwrap();
    assert!(
        fastest < Duration::from_millis(2),
        "{} header bytes took {fastest:?}",
        data.len()
    );
    assert_eq!(got, expected(&keys), "headers {keys:?}");
    match got {
        Ok(key) => {
            assert!(!key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY);
            assert!(key.iter().all(u8::is_ascii_graphic));
        }
        Err(e) => {
            let code = e.code();
            match e {
                KeyError::Missing => assert_eq!(code, "missing_idempotency_key"),
                _ => assert_eq!(code, "invalid_idempotency_key"),
            }
            let message = e.to_string();
            assert!(message.contains("Idempotency-Key"), "{message}");
            assert!(message.len() <= 200, "{message}");
            // The answer depends on the reason alone, never on the key's
            // other bytes: the same key with every other byte replaced is
            // refused alike (so nothing of it is echoed).
            if let [one] = keys.as_slice() {
                let mut other: Vec<u8> = one.iter().map(|_| b'x').collect();
                if let KeyError::Invalid { at, byte } = e {
                    other[at] = byte;
                }
                let mut map = HeaderMap::new();
                map.insert("idempotency-key", HeaderValue::from_bytes(&other).unwrap());
                let again = idempotency_key(&map).unwrap_err();
                assert_eq!(again, e);
                assert_eq!(again.to_string(), message);
            }
        }
    }
});
