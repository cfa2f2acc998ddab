//! Reading the compiler's dep-info (`.d`) file, so the build script reruns exactly when a source changes.

use std::path::PathBuf;

/// The prerequisites of the first rule in a Makefile-style dep-info file, unescaped.
pub fn parse(contents: &str) -> Vec<PathBuf> {
    let Some(first) = contents.lines().find(|l| !l.trim().is_empty()) else {
        return Vec::new();
    };
    let Some(colon) = find_rule_colon(first) else {
        return Vec::new();
    };
    split_escaped(&first[colon + 1..]).into_iter().map(PathBuf::from).collect()
}

/// The colon that ends the target: `: ` after an unescaped run (paths may hold `C:` on Windows).
fn find_rule_colon(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && (i + 1 == bytes.len() || bytes[i + 1] == b' ') && (i == 0 || bytes[i - 1] != b'\\')
    })
}

fn split_escaped(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next) => cur.push(next),
                None => cur.push('\\'),
            },
            ' ' | '\t' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_rule_with_escaped_spaces() {
        let d = "/t/deps/k-1.s: /src/lib.rs /src/my\\ file.rs /src/a.rs\n\n/src/lib.rs:\n/src/a.rs:\n";
        assert_eq!(
            parse(d),
            vec![PathBuf::from("/src/lib.rs"), PathBuf::from("/src/my file.rs"), PathBuf::from("/src/a.rs")]
        );
    }

    #[test]
    fn empty_file_has_no_prerequisites() {
        assert!(parse("").is_empty());
    }
}
