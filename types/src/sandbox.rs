//! Where things are inside a sandbox: the paths the sandbox plan builds and
//! mounts, which the launcher, the worker's commands and profile
//! validation name too.

/// The job's work dir, the worker's working directory.
pub const WORK: &str = "/work";
/// A private tmpfs; also the worker's `HOME`.
pub const TMP: &str = "/tmp";
/// Everything gatehouse itself puts into the sandbox.
pub const RUN: &str = "/run/gatehouse";
/// The proxy identity's socket (the relay's upstream), when the sandbox
/// is given the socket itself (`--proxy-socket`).
pub const PROXY_SOCKET: &str = "/run/gatehouse/proxy.sock";
/// The proxy identity's directory, when the sandbox is given that
/// (`--proxy-dir`): the proxy re-creates the socket in it after a restart,
/// and the sandbox sees the new one at the same path.
pub const PROXY_DIR: &str = "/run/gatehouse/proxy";
/// The name of the identity's socket in its directory.
pub const PROXY_SOCKET_NAME: &str = "proxy.sock";
/// Beside it, the identity's transparent socket: the relay forwards what
/// the worker sends to ports 443 and 80 there (`network.transparent`).
pub const TRANSPARENT_SOCKET_NAME: &str = "transparent.sock";
/// The job's control socket (`gatehouse report`, `gatehouse inbox`).
pub const CONTROL_SOCKET: &str = "/run/gatehouse/control.sock";
/// System roots plus the proxy's CA.
pub const CA_BUNDLE: &str = "/run/gatehouse/ca-bundle.pem";
/// Put first on the worker's `PATH` when there is a control socket.
pub const BIN_DIR: &str = "/run/gatehouse/bin";
/// The `gatehouse` binary, for the worker's commands.
pub const GATEHOUSE_BIN: &str = "/run/gatehouse/bin/gatehouse";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gatehouse_paths_are_under_run() {
        for path in [PROXY_SOCKET, PROXY_DIR, CONTROL_SOCKET, CA_BUNDLE, BIN_DIR] {
            assert_eq!(
                std::path::Path::new(path).parent(),
                Some(std::path::Path::new(RUN)),
                "{path}"
            );
        }
        assert_eq!(
            std::path::Path::new(GATEHOUSE_BIN).parent(),
            Some(std::path::Path::new(BIN_DIR))
        );
    }
}
