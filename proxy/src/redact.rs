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
//! held back until the next chunk (or the end) decides it; the next chunk
//! resumes that walk where it stopped. Each position is walked once, so the
//! work is the same however the body is chunked (at most its length times
//! the longest secret's), also when one secret is a prefix of another.

use std::sync::Arc;

use aho_corasick::AhoCorasick;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What replaces a secret value.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// A set of secret values, compiled for matching. Empty values are ignored.
#[derive(Clone, Default)]
pub struct Secrets {
    values: Vec<Vec<u8>>,
    trie: Trie,
    /// Answers "does any secret occur" for a whole buffer (every answer
    /// body, every header value), skipping with SIMD the bytes the trie
    /// would step through one by one (a token's base64 starts with `e`,
    /// which is in most JSON). `None` for an empty set: the trie answers.
    finder: Option<Finder>,
}

/// A multi-pattern searcher for [`Secrets::occur_in`]. Teddy (the packed
/// searcher) fingerprints each secret by its first bytes, rare in text;
/// the automaton's own prefilter picks single "rare" bytes, which the
/// base64 forms of a token share with most JSON, so it is the fallback
/// (more secrets than Teddy takes, or no SIMD).
#[derive(Clone)]
enum Finder {
    Packed(aho_corasick::packed::Searcher),
    Automaton(AhoCorasick),
}

impl Finder {
    fn new(values: &[Vec<u8>]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        if let Some(packed) = aho_corasick::packed::Searcher::new(values.iter()) {
            return Some(Self::Packed(packed));
        }
        AhoCorasick::new(values).ok().map(Self::Automaton)
    }

    fn is_match(&self, data: &[u8]) -> bool {
        match self {
            Self::Packed(searcher) => searcher.find(data).is_some(),
            Self::Automaton(automaton) => automaton.is_match(data),
        }
    }
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
        let finder = Finder::new(&values);
        Self {
            values,
            trie,
            finder,
        }
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
        match &self.finder {
            Some(finder) => finder.is_match(data),
            None => self.occur_in_by_trie(data),
        }
    }

    /// [`Secrets::occur_in`] walking the trie from every position.
    fn occur_in_by_trie(&self, data: &[u8]) -> bool {
        (0..data.len()).any(|i| {
            self.trie.starts[usize::from(data[i])] && self.trie.walk(&data[i..]).at.best > 0
        })
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

/// Where a walk from one position stands.
#[derive(Clone, Copy, Default)]
struct Cursor {
    /// The trie node reached.
    node: usize,
    /// The length of the longest secret passed on the way (0: none).
    best: usize,
}

/// A walk that has gone through the bytes it was given.
struct Walk {
    at: Cursor,
    /// The bytes ran out while a longer secret could still match: only
    /// later bytes (or the end) decide the position.
    open: bool,
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

    /// Walks on from `at`, which has gone through `depth` bytes, over
    /// `data`, counting one step per byte looked at into `work`. A walk
    /// stops at the first byte that leaves the trie or at a leaf, so the
    /// steps of one position's walk are the same whether its bytes come in
    /// one piece or in many.
    fn walk_on(&self, mut at: Cursor, depth: usize, data: &[u8], work: &mut u64) -> Walk {
        for (k, &b) in data.iter().enumerate() {
            let Some(next) = self.child(at.node, b) else {
                *work += k as u64 + 1;
                return Walk { at, open: false };
            };
            at.node = next;
            if self.nodes[next].terminal {
                at.best = depth + k + 1;
            }
            if self.nodes[next].next.is_empty() {
                *work += k as u64 + 1;
                return Walk { at, open: false };
            }
        }
        *work += data.len() as u64;
        Walk { at, open: true }
    }

    /// Walks `data` from its first byte.
    fn walk(&self, data: &[u8]) -> Walk {
        self.walk_on(Cursor::default(), 0, data, &mut 0)
    }
}

/// A streaming redactor over a fixed set of secret values.
pub struct Redactor {
    secrets: Arc<Secrets>,
    /// Bytes received but not yet decided: the walk from the first of them
    /// has gone through all of them and is still open.
    held: BytesMut,
    /// That walk, resumed by the next chunk rather than walked again.
    open: Cursor,
    /// Where output is written; each chunk's is split off it, so a stream
    /// of small chunks reuses one buffer instead of allocating per chunk.
    out: BytesMut,
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
            open: Cursor::default(),
            out: BytesMut::new(),
            work: 0,
        }
    }

    /// The trie steps taken so far: the same however the bytes were
    /// chunked (a held position's walk resumes where the last chunk left
    /// it), and at most the bytes fed times the longest secret's length
    /// (each position is walked once, never deeper than the trie).
    pub fn work(&self) -> u64 {
        self.work
    }

    /// Feeds one chunk; returns the bytes that are safe to send now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        if self.secrets.is_empty() || chunk.is_empty() {
            return Bytes::copy_from_slice(chunk);
        }
        if self.held.is_empty() {
            return self.scan_fresh(chunk);
        }
        // The common case of a stream of small chunks: the held walk goes
        // on and stays open. Kept small; deciding is out of line.
        let walk = self
            .secrets
            .trie
            .walk_on(self.open, self.held.len(), chunk, &mut self.work);
        if chunk.len() <= 8 {
            // A call to `memcpy` costs more than these few bytes.
            for &b in chunk {
                self.held.put_u8(b);
            }
        } else {
            self.held.extend_from_slice(chunk);
        }
        if walk.open {
            // Still undecided: nothing to send, nothing walked twice.
            self.open = walk.at;
            return Bytes::new();
        }
        self.decide_held(walk.at.best)
    }

    /// Scans a chunk that follows no held bytes.
    #[inline(never)]
    fn scan_fresh(&mut self, chunk: &[u8]) -> Bytes {
        let (keep_from, open) = scan(
            &self.secrets.trie,
            chunk,
            false,
            &mut self.out,
            &mut self.work,
        );
        self.held.extend_from_slice(&chunk[keep_from..]);
        self.open = open;
        self.out.split().freeze()
    }

    /// The first held position is decided (its walk found a secret of
    /// `best` bytes, or none); those after it are walked from the start,
    /// as one pass over the whole body walks them.
    #[inline(never)]
    fn decide_held(&mut self, best: usize) -> Bytes {
        let out = &mut self.out;
        let skip = decide(&self.held, best, out);
        let (keep_from, open) = scan(
            &self.secrets.trie,
            &self.held[skip..],
            false,
            out,
            &mut self.work,
        );
        self.held.advance(skip + keep_from);
        self.open = open;
        out.split().freeze()
    }

    /// Ends the stream; returns the held-back tail, redacted.
    pub fn finish(&mut self) -> Bytes {
        if self.held.is_empty() {
            return Bytes::new();
        }
        let out = &mut self.out;
        // At the end, the open walk is decided by what it has found.
        let skip = decide(&self.held, self.open.best, out);
        scan(
            &self.secrets.trie,
            &self.held[skip..],
            true,
            out,
            &mut self.work,
        );
        self.held.clear();
        out.split().freeze()
    }
}

/// Writes the decision for the first position of `data`, whose walk found
/// a secret of `best` bytes (0: none): the marker for the secret, or the
/// byte itself. Returns how many bytes it decided.
fn decide(data: &[u8], best: usize, out: &mut BytesMut) -> usize {
    if best > 0 {
        out.extend_from_slice(REDACTED);
        best
    } else {
        out.extend_from_slice(&data[..1]);
        1
    }
}

/// Redacts `data` into `out`, returning the index from which bytes are held
/// back (undecided until more bytes come; `data.len()` when none are) and
/// the open walk over them.
fn scan(
    trie: &Trie,
    data: &[u8],
    at_end: bool,
    out: &mut BytesMut,
    work: &mut u64,
) -> (usize, Cursor) {
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
        let walk = trie.walk_on(Cursor::default(), 0, &data[i..], work);
        if walk.open && !at_end {
            return (i, walk.at);
        }
        i += decide(&data[i..], walk.at.best, out);
    }
    (data.len(), Cursor::default())
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
