//! Mentions in GitHub Markdown: does a text `@`-mention an account?
//!
//! GitHub's webhook payloads carry no structured mention list, so the
//! source reads the text the way GitHub links it, and the result becomes a
//! structured `Address`; the gate still never reads the text. What does not
//! count: a mention inside code (a fenced block or a backtick span, which
//! GitHub does not link), a quoted line (`> …`: someone else's words), and
//! an `@` glued to a word (`me@bot.example`).

/// Whether `text` mentions any of `logins` (compared without case).
pub fn mentions(text: &str, logins: &[&str]) -> bool {
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some((ch, n)) = fence_marker(trimmed) {
            match fence {
                None => fence = Some((ch, n)),
                Some((open, len)) if open == ch && n >= len => fence = None,
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() || trimmed.starts_with('>') {
            continue;
        }
        if line_mentions(line, logins) {
            return true;
        }
    }
    false
}

/// A code fence: three or more backticks or tildes.
fn fence_marker(line: &str) -> Option<(char, usize)> {
    let ch = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|c| *c == ch).count();
    (n >= 3).then_some((ch, n))
}

fn is_login_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

fn line_mentions(line: &str, logins: &[&str]) -> bool {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut in_code: Option<usize> = None;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            in_code = match in_code {
                None => Some(run),
                Some(open) if open == run => None,
                keep => keep,
            };
            i += run;
            continue;
        }
        let glued = i > 0 && {
            let p = chars[i - 1];
            p.is_alphanumeric() || matches!(p, '_' | '-' | '@' | '/' | '.')
        };
        if c == '@' && in_code.is_none() && !glued {
            let name: String = chars[i + 1..]
                .iter()
                .take_while(|c| is_login_char(**c))
                .collect();
            let after = i + 1 + name.chars().count();
            let bot_suffix = chars[after..].starts_with(&['[', 'b', 'o', 't', ']']);
            let full = if bot_suffix {
                format!("{name}[bot]")
            } else {
                name.clone()
            };
            if !name.is_empty()
                && logins
                    .iter()
                    .any(|l| l.eq_ignore_ascii_case(&full) || l.eq_ignore_ascii_case(&name))
            {
                return true;
            }
            i = after;
            continue;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mention_table() {
        let bot = ["gatehouse-bot"];
        let cases: &[(&str, bool)] = &[
            ("@gatehouse-bot please fix", true),
            ("please fix, @gatehouse-bot.", true),
            ("(@gatehouse-bot)", true),
            ("@GATEHOUSE-BOT fix", true),
            ("first line\n@gatehouse-bot second", true),
            ("@gatehouse-bot[bot] fix", true),
            ("@gatehouse-botx fix", false),
            ("@gatehouse fix", false),
            ("gatehouse-bot fix", false),
            ("mail me@gatehouse-bot.example", false),
            ("a/@gatehouse-bot", false),
            ("`@gatehouse-bot` is the bot", false),
            ("``@gatehouse-bot`` is the bot", false),
            ("`code` then @gatehouse-bot", true),
            ("```\n@gatehouse-bot\n```", false),
            ("~~~\n@gatehouse-bot\n~~~\nafter", false),
            ("```\ncode\n```\n@gatehouse-bot", true),
            ("> @gatehouse-bot push to main", false),
            ("  > @gatehouse-bot push to main", false),
            ("> quoted\n@gatehouse-bot fix", true),
            ("", false),
            ("@", false),
            ("@@gatehouse-bot", false),
        ];
        for (text, expected) in cases {
            assert_eq!(mentions(text, &bot), *expected, "{text:?}");
        }
    }

    #[test]
    fn an_app_is_mentioned_by_its_slug() {
        let app = ["gatehouse-app[bot]", "gatehouse-app"];
        assert!(mentions("@gatehouse-app do it", &app));
        assert!(mentions("@gatehouse-app[bot] do it", &app));
        assert!(!mentions("@gatehouse do it", &app));
    }
}
