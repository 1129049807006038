//! Any body prefix: the receive-pack command parser never panics, never
//! claims more bytes than it was given, every ref it returns is valid; fed
//! the body a byte at a time (as a hostile client may send it), every
//! strict prefix of an accepted command list answers "need more", the
//! verdict is the one-shot parser's, and each pkt-line is parsed once (the
//! work is one pass over the body, bounded by the parser's limits).
#![no_main]

use gatehouse_proxy::receive_pack::{parse_commands, valid_ref_name, CommandParser, ParseError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = parse_commands(data);
    if let Ok(parsed) = &whole {
        assert!(parsed.consumed <= data.len());
        assert!(!parsed.commands.is_empty());
        assert!(parsed.commands.iter().all(|c| valid_ref_name(&c.name)));
        // A longer body with the same head parses to the same commands.
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"PACK");
        assert_eq!(parse_commands(&longer).as_ref(), Ok(parsed));
    }
    let mut parser = CommandParser::default();
    let mut verdict = Err(ParseError::NeedMore);
    for end in 1..=data.len() {
        verdict = parser.parse(&data[..end]);
        if verdict != Err(ParseError::NeedMore) {
            if let Ok(parsed) = &verdict {
                // Decided exactly at the flush: every shorter prefix said
                // "need more".
                assert_eq!(parsed.consumed, end, "decided before the flush");
            }
            break;
        }
    }
    match (&whole, &verdict) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(ParseError::NeedMore), Err(ParseError::NeedMore)) | (Err(_), Err(_)) => {}
        (a, b) => panic!("one-shot {a:?}, byte at a time {b:?}"),
    }
});
