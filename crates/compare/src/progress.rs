//! The progress bar on stderr (indicatif): drawn in place on a terminal; without one (CI
//! logs), a plain line per 5% of the plan.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The plan's weight is in estimated seconds; the bar counts it in milliseconds.
const UNITS: f64 = 1000.0;

const TEMPLATE: &str =
    "[{bar:30.cyan/blue}] {percent:>3}% {elapsed_precise} ETA {eta} | {wide_msg}";

pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    tty: bool,
    last_logged_pct: u64,
}

impl Progress {
    /// `total`: the plan's weight (estimated seconds).
    pub fn new(total: f64) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let target = if tty {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some((total.max(1e-3) * UNITS) as u64), target);
        // The template is a constant, checked by the `style_parses` test.
        if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
            bar.set_style(style.progress_chars("#>."));
        }
        Progress {
            bar,
            start: Instant::now(),
            tty,
            last_logged_pct: 0,
        }
    }

    /// Names the step now running.
    pub fn begin(&mut self, label: impl Into<String>) {
        self.bar.set_message(label.into());
        self.log_line(false);
    }

    /// Marks `weight` more of the plan done.
    pub fn advance(&mut self, weight: f64) {
        self.bar.inc((weight.max(0.0) * UNITS) as u64);
        self.log_line(false);
    }

    /// Prints a message above the bar.
    pub fn log(&mut self, msg: &str) {
        if self.tty {
            self.bar.suspend(|| eprintln!("{msg}"));
        } else {
            eprintln!("{msg}");
        }
    }

    pub fn finish(&mut self) {
        self.bar.set_message("done");
        self.bar.finish();
        self.log_line(true);
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Without a terminal: one line each time another 5% of the plan is done.
    fn log_line(&mut self, force: bool) {
        if self.tty {
            return;
        }
        let len = self.bar.length().unwrap_or(1).max(1);
        let pct = (self.bar.position() * 100 / len).min(100);
        if force || pct >= self.last_logged_pct + 5 {
            self.last_logged_pct = pct - pct % 5;
            eprintln!(
                "[{pct:3}%] {} | {}",
                fmt_secs(self.start.elapsed().as_secs_f64()),
                self.bar.message()
            );
        }
    }
}

pub fn fmt_secs(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn style_parses() {
        assert!(indicatif::ProgressStyle::with_template(super::TEMPLATE).is_ok());
    }
}
