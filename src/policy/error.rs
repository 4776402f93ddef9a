//! Policy errors that point at the offending line and say what to change.

use std::fmt;

/// An error in a policy file or on the command line, located as precisely as we can.
///
/// Rendered as `FILE:LINE:COLUMN: message`, then the offending line with a caret and,
/// where there is one, a hint such as "did you mean `rx`?".
#[derive(Debug, Clone)]
pub struct PolicyError {
    /// Where the policy came from: a path, `builtin:NAME`, or `command line`.
    pub origin: String,
    /// 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    /// The text of the offending line, for the caret display.
    pub source_line: Option<String>,
    /// Length of the caret underline.
    pub width: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl PolicyError {
    /// An error with no location inside a file (the file itself is missing, a flag is bad).
    pub fn plain(origin: impl Into<String>, message: impl Into<String>) -> Self {
        PolicyError {
            origin: origin.into(),
            position: None,
            source_line: None,
            width: 1,
            message: message.into(),
            hint: None,
        }
    }

    /// An error at a byte span of a file's text.
    pub fn at(
        origin: impl Into<String>,
        text: &str,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
    ) -> Self {
        let mut err = PolicyError::plain(origin, message);
        if let Some(span) = span {
            let start = span.start.min(text.len());
            let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            let line_no = text[..start].matches('\n').count() + 1;
            let col = text[line_start..start].chars().count() + 1;
            err.position = Some((line_no, col));
            err.source_line = Some(text[line_start..line_end].to_string());
            let end = span.end.min(line_end).max(start + 1);
            err.width = text[start..end.min(text.len())].chars().count().max(1);
        }
        err
    }

    /// Attach a hint line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, col)) => write!(f, "{}:{}:{}: {}", self.origin, line, col, self.message)?,
            None => write!(f, "{}: {}", self.origin, self.message)?,
        }
        if let (Some((line, col)), Some(src)) = (self.position, &self.source_line) {
            let gutter = line.to_string().len();
            write!(f, "\n {line} | {src}")?;
            write!(
                f,
                "\n {:gutter$} | {}{}",
                "",
                " ".repeat(col - 1),
                "^".repeat(self.width)
            )?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

/// The candidate closest to `word` by edit distance, if it is plausibly a typo of it.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let best = candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .min_by_key(|(d, _)| *d)?;
    let limit = (word.chars().count().max(best.1.len()) / 2).max(1);
    (best.0 <= limit).then_some(best.1)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_keys_only() {
        assert_eq!(
            nearest("rox", ["ro", "rx", "rw", "rwx", "deny"]),
            Some("ro")
        );
        assert_eq!(
            nearest("dney", ["ro", "rx", "rw", "rwx", "deny"]),
            Some("deny")
        );
        assert_eq!(nearest("completely", ["ro", "rx"]), None);
    }

    #[test]
    fn renders_line_and_caret() {
        let text = "[fs]\nrox = [\"/usr\"]\n";
        let err = PolicyError::at("p.toml", text, Some(5..8), "unknown key `rox`")
            .with_hint("did you mean `rx`?");
        let shown = err.to_string();
        assert!(
            shown.starts_with("p.toml:2:1: unknown key `rox`"),
            "{shown}"
        );
        assert!(shown.contains("2 | rox = [\"/usr\"]"), "{shown}");
        assert!(shown.contains("  | ^^^"), "{shown}");
        assert!(shown.ends_with("did you mean `rx`?"), "{shown}");
    }
}
