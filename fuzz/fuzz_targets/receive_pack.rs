//! Any body prefix: the receive-pack command parser never panics, never
//! claims more bytes than it was given, and every ref it returns is valid.
#![no_main]

use gatehouse_proxy::receive_pack::{parse_commands, valid_ref_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = parse_commands(data) {
        assert!(parsed.consumed <= data.len());
        assert!(!parsed.commands.is_empty());
        assert!(parsed.commands.iter().all(|c| valid_ref_name(&c.name)));
        // A longer body with the same head parses to the same commands.
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"PACK");
        assert_eq!(parse_commands(&longer).unwrap(), parsed);
    }
});
