//! Redaction of the exact secret values the proxy holds, from response
//! bodies streamed back to a sandbox. Pure: the caller feeds chunks and
//! forwards what comes out.
//!
//! The output is a function of the whole body, never of how it was split:
//! scanning left to right, at each position the longest held secret that
//! starts there is replaced, else the byte passes. The secrets are kept in
//! a trie, so deciding a position walks at most one secret's length
//! whatever the number of secrets; a position whose walk reaches the end of
//! the bytes received so far while a longer secret could still match is
//! held back until the next chunk (or the end) decides it. Each position is
//! decided once, so the work is linear in the body however it is chunked,
//! also when one secret is a prefix of another.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

/// What replaces a secret value.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// A set of secret values, compiled for matching. Empty values are ignored.
#[derive(Clone, Default)]
pub struct Secrets {
    values: Vec<Vec<u8>>,
    trie: Trie,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("count", &self.values.len())
            .finish_non_exhaustive()
    }
}

impl Secrets {
    pub fn new(values: impl IntoIterator<Item = Vec<u8>>) -> Self {
        let mut values: Vec<Vec<u8>> = values.into_iter().filter(|v| !v.is_empty()).collect();
        values.sort_unstable();
        values.dedup();
        let mut trie = Trie::default();
        for v in &values {
            trie.insert(v);
        }
        Self { values, trie }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The longest secret's length.
    pub fn longest(&self) -> usize {
        self.values.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Whether `value` is one of the secrets.
    pub fn holds(&self, value: &[u8]) -> bool {
        self.values.binary_search_by(|v| v[..].cmp(value)).is_ok()
    }

    /// Whether any secret occurs in `data`.
    pub fn occur_in(&self, data: &[u8]) -> bool {
        (0..data.len())
            .any(|i| self.trie.starts[usize::from(data[i])] && self.trie.walk(&data[i..]).best > 0)
    }

    /// Whether any secret occurs in `data`, ignoring ASCII case (for header
    /// names, which HTTP/1 parsers lowercase).
    pub fn occur_in_ignoring_case(&self, data: &[u8]) -> bool {
        // Compared in place: this runs for every header of every answer.
        self.values.iter().any(|s| {
            data.windows(s.len())
                .any(|w| w.eq_ignore_ascii_case(s.as_slice()))
        })
    }
}

/// A byte trie of the secrets. Node 0 is the root.
#[derive(Clone)]
struct Trie {
    nodes: Vec<Node>,
    /// Whether a byte starts some secret: most bytes are skipped on this.
    starts: [bool; 256],
}

impl Default for Trie {
    fn default() -> Self {
        Self {
            nodes: vec![Node::default()],
            starts: [false; 256],
        }
    }
}

#[derive(Clone, Default)]
struct Node {
    /// Children by byte, sorted.
    next: Vec<(u8, u32)>,
    /// A secret ends here.
    terminal: bool,
}

/// What a walk from one position found.
struct Walk {
    /// The length of the longest secret that starts there (0: none).
    best: usize,
    /// The bytes ran out while a longer secret could still match.
    open: bool,
    /// Trie steps taken.
    steps: usize,
}

impl Trie {
    fn insert(&mut self, value: &[u8]) {
        self.starts[usize::from(value[0])] = true;
        let mut node = 0usize;
        for &b in value {
            node = match self.child(node, b) {
                Some(next) => next,
                None => {
                    let id = self.nodes.len();
                    self.nodes.push(Node::default());
                    let next = &mut self.nodes[node].next;
                    let at = next.partition_point(|(c, _)| *c < b);
                    next.insert(at, (b, id as u32));
                    id
                }
            };
        }
        self.nodes[node].terminal = true;
    }

    fn child(&self, node: usize, b: u8) -> Option<usize> {
        let next = &self.nodes[node].next;
        next.binary_search_by_key(&b, |(c, _)| *c)
            .ok()
            .map(|i| next[i].1 as usize)
    }

    /// Walks `data` from its first byte as far as the trie goes.
    fn walk(&self, data: &[u8]) -> Walk {
        let mut node = 0usize;
        let mut best = 0;
        for (depth, &b) in data.iter().enumerate() {
            match self.child(node, b) {
                Some(next) => node = next,
                None => {
                    return Walk {
                        best,
                        open: false,
                        steps: depth + 1,
                    }
                }
            }
            if self.nodes[node].terminal {
                best = depth + 1;
            }
        }
        Walk {
            best,
            open: !self.nodes[node].next.is_empty(),
            steps: data.len(),
        }
    }
}

/// A streaming redactor over a fixed set of secret values.
pub struct Redactor {
    secrets: Arc<Secrets>,
    /// Bytes received but not yet decided; its first byte is the first
    /// undecided position.
    held: BytesMut,
    /// Trie steps taken so far (see [`Redactor::work`]).
    work: u64,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for `secrets`; empty values are ignored.
    pub fn new(secrets: Vec<Vec<u8>>) -> Self {
        Self::shared(Arc::new(Secrets::new(secrets)))
    }

    /// A redactor over a shared set of secrets (no copy per response).
    pub fn shared(secrets: Arc<Secrets>) -> Self {
        Self {
            secrets,
            held: BytesMut::new(),
            work: 0,
        }
    }

    /// The trie steps taken so far: at most twice the bytes fed times the
    /// longest secret's length, however the bytes were chunked (each
    /// position is walked once when decided, and the one held back is
    /// walked again once per chunk while it stays undecided).
    pub fn work(&self) -> u64 {
        self.work
    }

    /// Feeds one chunk; returns the bytes that are safe to send now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        if self.secrets.is_empty() || chunk.is_empty() {
            return Bytes::copy_from_slice(chunk);
        }
        let mut out = BytesMut::with_capacity(self.held.len() + chunk.len());
        if self.held.is_empty() {
            let keep_from = scan(&self.secrets.trie, chunk, false, &mut out, &mut self.work);
            self.held.extend_from_slice(&chunk[keep_from..]);
        } else {
            self.held.extend_from_slice(chunk);
            let keep_from = scan(
                &self.secrets.trie,
                &self.held,
                false,
                &mut out,
                &mut self.work,
            );
            let _ = self.held.split_to(keep_from);
        }
        out.freeze()
    }

    /// Ends the stream; returns the held-back tail, redacted.
    pub fn finish(&mut self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.held.len());
        scan(
            &self.secrets.trie,
            &self.held,
            true,
            &mut out,
            &mut self.work,
        );
        self.held.clear();
        out.freeze()
    }
}

/// Redacts `data` into `out`, returning the index from which bytes are held
/// back (undecided until more bytes come); `data.len()` when none are.
fn scan(trie: &Trie, data: &[u8], at_end: bool, out: &mut BytesMut, work: &mut u64) -> usize {
    let mut i = 0;
    while i < data.len() {
        // Copy the run of bytes that cannot start a secret in one go.
        let run = data[i..]
            .iter()
            .position(|b| trie.starts[usize::from(*b)])
            .unwrap_or(data.len() - i);
        out.extend_from_slice(&data[i..i + run]);
        i += run;
        if i == data.len() {
            break;
        }
        let walk = trie.walk(&data[i..]);
        *work += walk.steps as u64;
        if walk.open && !at_end {
            return i;
        }
        if walk.best > 0 {
            out.extend_from_slice(REDACTED);
            i += walk.best;
        } else {
            out.extend_from_slice(&data[i..i + 1]);
            i += 1;
        }
    }
    data.len()
}

/// Redacts a whole body. A body in which no secret occurs is returned as
/// it is (shared, not copied): redaction would not change a byte of it.
pub fn redact_body(secrets: &Secrets, data: Bytes) -> Bytes {
    if secrets.occur_in(&data) {
        Bytes::from(redact_all(secrets, &data))
    } else {
        data
    }
}

/// Redacts a whole buffer at once (for log lines and error texts).
pub fn redact_all(secrets: &Secrets, data: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(data.len());
    scan(&secrets.trie, data, true, &mut out, &mut 0);
    out.to_vec()
}

#[cfg(test)]
mod tests;
