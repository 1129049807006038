//! Transparent mode end to end: inside a real sandbox whose profile sets
//! `network.transparent`, with every proxy variable unset, clients that
//! resolve and connect themselves (Node's `fetch`, Python's urllib, curl
//! with `--noproxy '*'`, raw sockets) reach the GitHub emulator through the
//! relay's ports 443 and 80 and the proxy's transparent socket, under the
//! same rules and the same SNI = Host checks as through CONNECT.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use gatehouse_testkit::proxy::{Harness, IDENTITY};
use gatehouse_testkit::sandbox::{Mode, Scratch};
use gatehouse_testkit::{require, Need};

const PROFILE: &str = r#"extends = "default"
[network]
transparent = true
transparent_hosts = ["api.github.com", "github.com", "unruled.example.com"]
"#;

/// Each check prints `NAME: <what it saw>` on one line.
const SCRIPT: &str = r#"
unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy
# NAME: what the command printed (stdout and stderr), on one line.
say() { name=$1; shift; printf '%s: %s\n' "$name" "$("$@" 2>&1 | tr -d '\n')"; }
ISSUE=https://api.github.com/repos/acme/widgets/issues/1
say NODE node -e 'fetch(process.argv[1]).then(async r => console.log(r.status, await r.text())).catch(e => console.log("ERR", e.cause ? e.cause.code : e.message))' "$ISSUE"
say URLLIB python3 -c 'import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1]); print(r.status, r.read().decode())' "$ISSUE"
say CURL curl -sS --noproxy '*' -w ' %{http_code}' "$ISSUE"
say DENIED curl -sS --noproxy '*' -w ' %{http_code}' https://api.github.com/repos/acme/secret-plans/issues/1
say UNRESOLVED curl -sS --noproxy '*' https://pypi.org/simple/
say GAI python3 -c 'import socket
try:
    socket.getaddrinfo("pypi.org", 443); print("resolved")
except socket.gaierror as e:
    print("gaierror", e.errno)'
cat > /tmp/tls.py <<'PY'
import socket, ssl, sys
sni, host = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context()
if sni == "-":
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
elif sni != host:
    ctx.check_hostname = False
try:
    with socket.create_connection(("127.0.0.1", 443)) as raw:
        with ctx.wrap_socket(raw, server_hostname=None if sni == "-" else sni) as s:
            s.sendall(("GET /repos/acme/widgets/issues/1 HTTP/1.1\r\nHost: %s\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n" % host).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            text = data.decode(errors="replace")
            print(text.split("\r\n")[0], text.split("\r\n\r\n", 1)[-1])
except (ssl.SSLError, OSError) as e:
    print("REFUSED", type(e).__name__)
PY
say TLS_OK python3 /tmp/tls.py api.github.com api.github.com
say TLS_UNRULED python3 /tmp/tls.py unruled.example.com unruled.example.com
say TLS_NO_SNI python3 /tmp/tls.py - api.github.com
say TLS_FORGED python3 /tmp/tls.py api.github.com github.com
cat > /tmp/plain.py <<'PY'
import socket, sys
target, host = sys.argv[1], sys.argv[2]
with socket.create_connection(("127.0.0.1", 80)) as s:
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n" % (target, host)).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    text = data.decode(errors="replace")
    print(text.split("\r\n")[0], text.split("\r\n\r\n", 1)[-1])
PY
say HTTP_OK curl -sS --noproxy '*' -w ' %{http_code}' http://api.github.com/repos/acme/widgets/issues/1
say HTTP_ABS_OK python3 /tmp/plain.py http://api.github.com/repos/acme/widgets/issues/1 api.github.com
say HTTP_MISMATCH python3 /tmp/plain.py http://api.github.com/repos/acme/widgets/issues/1 github.com
say HTTP_UNRULED python3 /tmp/plain.py /repos/acme/widgets/issues/1 evil.example.com
say PROXY_STILL curl -sS -w ' %{http_code}' --proxy http://127.0.0.1:3128 "$ISSUE"
"#;

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}: ");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {name} line in\n{out}"))
}

fn sandbox(h: &Harness, s: &Scratch, profile: &Path) -> String {
    let dir = h.socket.parent().unwrap();
    let run = s.sh_with(
        profile.to_str().unwrap(),
        &[
            "--proxy-dir",
            dir.to_str().unwrap(),
            "--ca-cert",
            h.proxy_ca.to_str().unwrap(),
        ],
        SCRIPT,
    );
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        run.code, run.stdout, run.stderr
    )
}

/// The refusal lines of the identity whose reason contains `part`.
fn refusals(h: &Harness, part: &str) -> Vec<serde_json::Value> {
    h.audit_lines()
        .into_iter()
        .filter(|l| {
            l["identity"] == IDENTITY
                && l["outcome"]["decision"] == "deny"
                && l["outcome"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(part))
        })
        .collect()
}

#[test]
fn clients_that_ignore_proxy_settings_reach_only_what_the_rules_allow() {
    require!(Need::Root, Need::Sandbox);
    let h = Harness::start();
    let s = Scratch::new(Mode::Root);
    let profile = s.profile("transparent", PROFILE);
    let all = sandbox(&h, &s, &profile);
    let out = all.as_str();

    // (a), (b): Node's fetch, urllib and curl without a proxy, allowed.
    for name in ["NODE", "URLLIB"] {
        let got = line(out, name);
        assert!(
            got.starts_with("200 ") && got.contains("Widgets wobble"),
            "{name}: {all}"
        );
    }
    let curl = line(out, "CURL");
    assert!(
        curl.contains("Widgets wobble") && curl.ends_with(" 200"),
        "{all}"
    );
    // The credential was injected, never seen inside.
    assert!(!out.contains(&h.token), "the sandbox saw the token");
    assert!(h
        .github
        .requests()
        .iter()
        .any(|r| r.path == "/repos/acme/widgets/issues/1" && r.authorization().is_some()));

    // (c): a path no rule allows is 403 with the reason.
    let denied = line(out, "DENIED");
    assert!(denied.ends_with(" 403"), "{all}");
    assert!(denied.contains(r#""error":"gatehouse_denied""#), "{all}");
    assert!(denied.contains(r#""reason":"#), "{all}");

    // (d): a host outside the profile's list does not resolve.
    assert!(
        line(out, "UNRESOLVED").contains("Could not resolve host"),
        "{all}"
    );
    assert!(line(out, "GAI").starts_with("gaierror"), "{all}");

    // (e): TLS on 127.0.0.1:443: the right SNI is served (control); an SNI
    // no rule names, no SNI, and an SNI other than Host are refused.
    let ok = line(out, "TLS_OK");
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.contains("Widgets wobble"),
        "{all}"
    );
    assert!(line(out, "TLS_UNRULED").starts_with("REFUSED"), "{all}");
    assert!(line(out, "TLS_NO_SNI").starts_with("REFUSED"), "{all}");
    let forged = line(out, "TLS_FORGED");
    assert!(forged.starts_with("HTTP/1.1 400"), "{all}");
    assert!(forged.contains("Host header does not match"), "{all}");

    // (f): plain HTTP on port 80: Host is the target (control: allowed,
    // in either form); an absolute-form target other than Host is refused,
    // and so is a Host no rule names.
    assert!(line(out, "HTTP_OK").ends_with(" 200"), "{all}");
    assert!(
        line(out, "HTTP_ABS_OK").starts_with("HTTP/1.1 200"),
        "{all}"
    );
    let mismatch = line(out, "HTTP_MISMATCH");
    assert!(mismatch.starts_with("HTTP/1.1 400"), "{all}");
    assert!(mismatch.contains("Host header does not match"), "{all}");
    let unruled = line(out, "HTTP_UNRULED");
    assert!(unruled.starts_with("HTTP/1.1 403"), "{all}");
    assert!(unruled.contains("gatehouse_denied"), "{all}");

    // The proxy itself still works beside transparent mode.
    assert!(line(out, "PROXY_STILL").ends_with(" 200"), "{all}");

    // Every refusal is on record with the identity and why.
    let unruled_tls = refusals(&h, "no rule of this identity's rule sets names this host");
    assert!(
        unruled_tls
            .iter()
            .any(|l| l["host"] == "unruled.example.com" && l["method"] == "CONNECT"),
        "{unruled_tls:?}"
    );
    assert_eq!(refusals(&h, "no TLS server name (SNI)").len(), 1);
    assert!(refusals(&h, "Host header does not match")
        .iter()
        .any(|l| l["host"] == "api.github.com"));
    assert!(refusals(&h, "Host header does not match").len() >= 2);
    assert!(!refusals(&h, "")
        .iter()
        .filter(|l| l["host"] == "evil.example.com")
        .collect::<Vec<_>>()
        .is_empty());
    assert!(refusals(&h, "")
        .iter()
        .any(|l| l["path"] == "/repos/acme/secret-plans/issues/1"));
}

#[test]
fn without_the_setting_no_name_resolves_and_ports_443_and_80_are_closed() {
    require!(Need::Root, Need::Sandbox);
    let h = Harness::start();
    let s = Scratch::new(Mode::Root);
    let profile = s.profile("plain", "extends = \"default\"\n");
    let dir = h.socket.parent().unwrap();
    let run = s.sh_with(
        profile.to_str().unwrap(),
        &[
            "--proxy-dir",
            dir.to_str().unwrap(),
            "--ca-cert",
            h.proxy_ca.to_str().unwrap(),
        ],
        r#"
say() { name=$1; shift; printf '%s: %s\n' "$name" "$("$@" 2>&1 | tr -d '\n')"; }
say RESOLVE curl -sS --noproxy '*' https://api.github.com/
say PORT443 python3 -c 'import socket
try:
    socket.create_connection(("127.0.0.1", 443)); print("open")
except OSError as e:
    print("closed", e.errno)'
say PROXY curl -sS -w ' %{http_code}' https://api.github.com/repos/acme/widgets/issues/1
"#,
    );
    let all = format!("{:?}\n{}\n{}", run.code, run.stdout, run.stderr);
    assert!(
        line(&run.stdout, "RESOLVE").contains("Could not resolve host"),
        "{all}"
    );
    assert!(line(&run.stdout, "PORT443").starts_with("closed"), "{all}");
    // Control: the proxy path works in the same sandbox.
    assert!(line(&run.stdout, "PROXY").ends_with(" 200"), "{all}");
}
