//! Feishu's encryption and signature: AES-256-CBC with the key SHA-256 of
//! the encrypt key, the IV the first 16 bytes of the decoded payload and
//! PKCS#7 padding; `X-Lark-Signature` the hex SHA-256 of timestamp, nonce,
//! encrypt key and raw body.

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use base64::Engine as _;
use sha2::{Digest, Sha256};

type Decryptor = cbc::Decryptor<aes::Aes256>;
type Encryptor = cbc::Encryptor<aes::Aes256>;

const IV: usize = 16;

fn cipher_key(encrypt_key: &[u8]) -> [u8; 32] {
    Sha256::digest(encrypt_key).into()
}

/// Decrypts `sealed` (base64 of IV and ciphertext); `None` for anything
/// that is not a well-padded ciphertext under this key.
pub fn decrypt(encrypt_key: &[u8], sealed: &str) -> Option<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .ok()?;
    if bytes.len() < 2 * IV || bytes.len() % IV != 0 {
        return None;
    }
    let (iv, ciphertext) = bytes.split_at(IV);
    Decryptor::new_from_slices(&cipher_key(encrypt_key), iv)
        .ok()?
        .decrypt_padded_vec_mut::<Pkcs7>(ciphertext)
        .ok()
}

/// Encrypts `plain` under `iv` the way Feishu does (for the emulator and
/// tests; the router itself only decrypts).
pub fn encrypt(encrypt_key: &[u8], iv: [u8; IV], plain: &[u8]) -> String {
    let ciphertext = Encryptor::new(&cipher_key(encrypt_key).into(), &iv.into())
        .encrypt_padded_vec_mut::<Pkcs7>(plain);
    let mut sealed = iv.to_vec();
    sealed.extend_from_slice(&ciphertext);
    base64::engine::general_purpose::STANDARD.encode(sealed)
}

/// SHA-256 of timestamp + nonce + encrypt key + body.
pub fn signature(timestamp: &str, nonce: &str, encrypt_key: &[u8], body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(timestamp.as_bytes());
    h.update(nonce.as_bytes());
    h.update(encrypt_key);
    h.update(body);
    h.finalize().into()
}

/// Compares in time that depends only on the lengths.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let sealed = encrypt(b"key", [7; 16], br#"{"a":1}"#);
        assert_eq!(
            decrypt(b"key", &sealed).as_deref(),
            Some(&br#"{"a":1}"#[..])
        );
        // Another key: the padding check fails (or, rarely, garbage that is
        // not the plaintext).
        assert_ne!(
            decrypt(b"other", &sealed).as_deref(),
            Some(&br#"{"a":1}"#[..])
        );
        assert_eq!(decrypt(b"key", "not base64!"), None);
        assert_eq!(
            decrypt(
                b"key",
                &base64::engine::general_purpose::STANDARD.encode([1u8; 20])
            ),
            None
        );
        assert_eq!(
            decrypt(
                b"key",
                &base64::engine::general_purpose::STANDARD.encode([1u8; 16])
            ),
            None
        );
    }

    /// A vector computed independently (Python: hashlib, cryptography).
    #[test]
    fn known_vectors() {
        let sig = signature("1700000000", "n1", b"ek", b"{}");
        assert_eq!(hex::encode(sig), KNOWN_SIGNATURE);
        assert_eq!(
            decrypt(b"test key", KNOWN_SEALED).as_deref(),
            Some(&b"hello world"[..])
        );
    }

    const KNOWN_SIGNATURE: &str =
        "001f046b4bb8b103bc3d4de31943942f10ea8bef28a23f107d952bf20782f26f";
    /// IV 00..0f, the plaintext `hello world`.
    const KNOWN_SEALED: &str = "AAECAwQFBgcICQoLDA0ODx9boKUoUEfLsblbVEKm75s=";

    #[test]
    fn same_compares_whole_slices() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
