//! Raw clients of an identity socket, for framing and TLS attacks.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;

/// One `read`, again while a signal interrupts it. A socket with a read
/// timeout is never restarted after a signal (signal(7)), whatever the
/// handler's flags, and the emulators' `git` children send SIGCHLD to the
/// test process at any time: a read that came back `Interrupted` read
/// nothing and says nothing about the peer.
pub fn read_some(s: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads up to the end of a response head, byte by byte (so nothing of
/// what follows is consumed).
pub fn read_head(s: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match read_some(s, &mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until the peer closes (or the read timeout), returning what came.
pub fn read_all(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read_some(s, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug)]
struct AcceptAnything;

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// TLS over `s` with SNI `sni`, verifying the proxy CA when `verify`
/// (an attacker lying about SNI would not verify, so those tests don't).
pub fn tls_over(
    s: UnixStream,
    sni: &str,
    proxy_ca: &Path,
    verify: bool,
) -> rustls::StreamOwned<rustls::ClientConnection, UnixStream> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap();
    let config = if verify {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(proxy_ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything))
            .with_no_client_auth()
    };
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    rustls::StreamOwned::new(conn, s)
}

/// Whether the peer closed the connection (EOF or reset) before the read
/// timeout, and what it sent until then.
pub fn read_until_closed(s: &mut impl Read) -> (bool, String) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match read_some(s, &mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false
            }
            Err(_) => break true,
        }
    };
    (closed, String::from_utf8_lossy(&out).into_owned())
}

/// One request through an identity's `socket` to `https://api.github.com`
/// (CONNECT, then TLS verified against the proxy's `ca`), the connection
/// closed after it; returns the status and the body as JSON (`Null` when
/// it is not).
pub fn api_call(
    socket: &Path,
    ca: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    let (status, text) = api_call_text(socket, ca, method, path, body);
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// As [`api_call`], the body as text (bytes that are not UTF-8 replaced),
/// for answers that are not JSON (a log archive).
pub fn api_call_text(
    socket: &Path,
    ca: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    use std::io::Write;
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "CONNECT answered {head}");
    let mut tls = tls_over(s, "api.github.com", ca, true);
    // One write, so one TLS record: a refusal answered from the head alone
    // (then the connection closed) cannot meet a body still being written
    // piece by piece, which `write!` does, and fail it with a broken pipe.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).unwrap();
    tls.flush().unwrap();
    let answer = read_all(&mut tls);
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let text = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, text.to_owned())
}
