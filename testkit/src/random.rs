//! Random values generated at test time (never a real-looking constant).

use std::io::Read;

fn bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut out)
        .unwrap();
    out
}

/// `prefix` followed by 40 random hex digits.
pub fn token(prefix: &str) -> String {
    let hex: String = bytes::<20>().iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// A random number.
pub fn number() -> u64 {
    u64::from_le_bytes(bytes::<8>())
}

/// `tag`, this process's id and a random number: a marker no other process
/// on the host carries.
pub fn marker(tag: &str) -> String {
    format!("{tag}-{}-{}", std::process::id(), number())
}
