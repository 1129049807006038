//! The environment variables gatehouse sets or reads. Every name is in
//! gatehouse's own [`PREFIX`] space, which a configured worker environment
//! may not use.

/// Gatehouse's own variable names start with this.
pub const PREFIX: &str = "GATEHOUSE_";
/// The control socket of `gatehouse report` and `gatehouse inbox`; inside a
/// sandbox they default to [`crate::sandbox::CONTROL_SOCKET`].
pub const CONTROL_SOCKET: &str = "GATEHOUSE_CONTROL_SOCKET";
/// The worker's job id.
pub const JOB: &str = "GATEHOUSE_JOB";
/// The worker's ticket id.
pub const TICKET: &str = "GATEHOUSE_TICKET";
/// The worker's prompt, relative to its work dir.
pub const PROMPT: &str = "GATEHOUSE_PROMPT";
/// The bot's fork a worker pushes to, when its team delivers from one.
pub const FORK: &str = "GATEHOUSE_FORK";
/// The router's state database (`gatehouse router`).
pub const STATE: &str = "GATEHOUSE_STATE";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_in_gatehouses_space() {
        for name in [CONTROL_SOCKET, JOB, TICKET, PROMPT, STATE] {
            assert!(
                name.len() > PREFIX.len() && name.starts_with(PREFIX),
                "{name}"
            );
        }
    }
}
