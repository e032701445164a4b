//! [`Table`]: rows of cells, rendered as Markdown (the reports) or as aligned text (stdout).

use std::fmt::Write as _;

/// A table rendered as Markdown or as aligned text.
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    pub right: Vec<bool>,
}

impl Table {
    pub fn new(headers: &[&str], right: &[bool]) -> Table {
        Table {
            headers: headers.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            right: right.to_vec(),
        }
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("| {} |\n|", self.headers.join(" | "));
        for i in 0..self.headers.len() {
            s.push_str(if self.right.get(i).copied().unwrap_or(false) {
                "--:|"
            } else {
                "---|"
            });
        }
        s.push('\n');
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }

    pub fn text(&self) -> String {
        let n = self.headers.len();
        let width = |i: usize| {
            std::iter::once(&self.headers[i])
                .chain(self.rows.iter().map(|r| &r[i]))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                if self.right.get(i).copied().unwrap_or(false) {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                }
                s.push_str("  ");
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        // As wide as the widest line: the columns and the two spaces between each pair.
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * n.saturating_sub(1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}
