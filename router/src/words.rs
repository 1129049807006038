//! Counting words the way people read them, in English, Chinese or both.
//!
//! The rule, applied left to right:
//! 1. A code span (text between backticks, fenced blocks included) is one word.
//! 2. A URL (`http://` or `https://` up to whitespace) is one word.
//! 3. A run of Han characters is segmented into words by jieba (its embedded
//!    dictionary, no HMM, so the same text always gives the same words).
//! 4. Everything else is split at Unicode word boundaries (UAX #29); a
//!    segment is a word when it holds a letter, a digit or a symbol such as
//!    an emoji. Whitespace and punctuation are not words.
//!
//! Mixed text counts the sum. [`words`] returns the words themselves, which
//! is also how an `attention` reply is compared "word for word" with the
//! worker's question.

use std::sync::LazyLock;

use jieba_rs::Jieba;
use unicode_segmentation::UnicodeSegmentation;

// Building the dictionary is costly; build it once, on first use.
static JIEBA: LazyLock<Jieba> = LazyLock::new(Jieba::new);

/// The number of words in `text`.
pub fn count_words(text: &str) -> usize {
    words(text).len()
}

/// The words of `text`, in order.
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let special = next_special(rest);
        let (plain, tail) = match special {
            Some((start, _)) => rest.split_at(start),
            None => (rest, ""),
        };
        plain_words(plain, &mut out);
        match special {
            Some((start, end)) => {
                out.push(&rest[start..end]);
                rest = &rest[end..];
            }
            None => rest = tail,
        }
    }
    out
}

/// The byte range of the first code span or URL in `s`, if any.
fn next_special(s: &str) -> Option<(usize, usize)> {
    let code = s.find('`').and_then(|start| {
        let ticks = s[start..].bytes().take_while(|&b| b == b'`').count();
        let fence = &s[start..start + ticks];
        let body = start + ticks;
        // An unclosed backtick is plain text.
        s[body..]
            .find(fence)
            .map(|close| (start, body + close + ticks))
    });
    let url = ["https://", "http://"]
        .iter()
        .filter_map(|scheme| s.find(scheme))
        .min()
        .map(|start| {
            let len = s[start..]
                .find(char::is_whitespace)
                .unwrap_or(s.len() - start);
            // Trailing sentence punctuation is not part of the link.
            let trimmed = s[start..start + len]
                .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '。', '，', '）'])
                .len();
            (start, start + trimmed.max(1))
        });
    match (code, url) {
        (Some(c), Some(u)) => Some(if c.0 <= u.0 { c } else { u }),
        (c, u) => c.or(u),
    }
}

fn plain_words<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let mut run_start: Option<usize> = None;
    let mut other_start = 0;
    for (i, c) in s.char_indices() {
        match (is_han(c), run_start) {
            (true, None) => {
                uax29_words(&s[other_start..i], out);
                run_start = Some(i);
            }
            (false, Some(start)) => {
                han_words(&s[start..i], out);
                run_start = None;
                other_start = i;
            }
            _ => {}
        }
    }
    match run_start {
        Some(start) => han_words(&s[start..], out),
        None => uax29_words(&s[other_start..], out),
    }
}

fn han_words<'a>(run: &'a str, out: &mut Vec<&'a str>) {
    out.extend(JIEBA.cut(run, false).into_iter().map(|t| t.word));
}

fn uax29_words<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    out.extend(s.split_word_bounds().filter(|seg| {
        seg.chars()
            .any(|c| !c.is_whitespace() && !is_punctuation(c))
    }));
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32,
            0x2000..=0x206F // general punctuation (dashes, quotes, ZWJ, …)
            | 0x3000..=0x303F // CJK symbols and punctuation
            | 0xFF00..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40 | 0xFF5B..=0xFF65 // full-width
            | 0xFE30..=0xFE4F // CJK compatibility forms
            | 0x00A1..=0x00BF // Latin-1 punctuation and signs
            | 0xFE0F // variation selector
        )
}

/// Han script: the CJK unified ideographs and their extensions and
/// compatibility blocks.
fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF
        | 0x20000..=0x2A6DF | 0x2A700..=0x2EBEF | 0x2F800..=0x2FA1F | 0x30000..=0x3134F
        | 0x3007)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counting_table() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("   \n\t ", 0),
            ("Hello, world!", 2),
            ("The PR is ready: it fixes the login flow.", 9),
            ("don't stop", 2),
            ("version 1.2.3 ships", 3),
            ("我们明天发布新版本", 5),   // 我们 / 明天 / 发布 / 新 / 版本
            ("我们明天发布新版本。", 5), // punctuation is not a word
            ("PR 已经合并", 3),          // PR / 已经 / 合并
            ("请看 https://github.com/acme/widgets/pull/7 谢谢", 4),
            ("see https://example.com/a?b=c#d.", 2),
            ("run `cargo test --workspace` now", 3),
            ("```\nfn main() { println!(\"hi\"); }\n```", 1),
            ("an `unclosed tick", 3),
            ("ship it 👍", 3),
            ("👍🏽👍🏽", 2),
            ("👨‍👩‍👧", 1),
            ("— … ！？", 0),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(text, want)| count_words(text) != *want)
            .map(|(text, want)| format!("{text:?}: want {want}, got {:?}", words(text)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn words_keep_urls_and_code_whole() {
        assert_eq!(
            words("fix `a b` at https://x.y/z ok"),
            vec!["fix", "`a b`", "at", "https://x.y/z", "ok"]
        );
    }

    #[test]
    fn a_hundred_words_is_a_hundred() {
        let text = vec!["word"; 100].join(" ");
        assert_eq!(count_words(&text), 100);
        assert_eq!(count_words(&format!("{text} more")), 101);
    }

    proptest! {
        /// Counting never panics and whitespace between words never adds any.
        #[test]
        fn whitespace_is_never_a_word(parts in proptest::collection::vec("[a-z]{1,6}|[一-龥]{1,4}|[!-/]", 0..20)) {
            let spaced = parts.join("  ");
            let tight = parts.join(" ");
            prop_assert_eq!(count_words(&spaced), count_words(&tight));
        }

        #[test]
        fn any_text_counts_without_panicking(s in ".{0,80}") {
            let n = count_words(&s);
            prop_assert!(n <= s.chars().count());
        }
    }
}
