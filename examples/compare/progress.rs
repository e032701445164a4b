//! A progress bar on stderr: redrawn in place on a terminal, one line per 5% otherwise (CI logs).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    total: f64,
    done: f64,
    start: Instant,
    tty: bool,
    last_draw: Option<Instant>,
    last_logged_pct: u32,
    label: String,
}

impl Progress {
    /// `total`: the plan's weight (estimated seconds).
    pub fn new(total: f64) -> Progress {
        Progress {
            total: total.max(1e-9),
            done: 0.0,
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            last_draw: None,
            last_logged_pct: 0,
            label: String::new(),
        }
    }

    /// Names the step now running.
    pub fn begin(&mut self, label: impl Into<String>) {
        self.label = label.into();
        self.draw(false);
    }

    /// Marks `weight` more of the plan done.
    pub fn advance(&mut self, weight: f64) {
        self.done = (self.done + weight).min(self.total);
        self.draw(false);
    }

    /// Prints a message above the bar.
    pub fn log(&mut self, msg: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{msg}");
        drop(err);
        self.draw(true);
    }

    pub fn finish(&mut self) {
        self.done = self.total;
        self.label = "done".into();
        self.draw(true);
        if self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn draw(&mut self, force: bool) {
        let frac = self.done / self.total;
        let elapsed = self.start.elapsed();
        let eta = if frac > 0.02 {
            let secs = elapsed.as_secs_f64() * (1.0 - frac) / frac;
            format!("ETA {}", fmt_secs(secs))
        } else {
            "ETA --".to_string()
        };
        let pct = (frac * 100.0) as u32;
        let mut err = std::io::stderr().lock();
        if self.tty {
            if !force
                && self
                    .last_draw
                    .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
            {
                return;
            }
            self.last_draw = Some(Instant::now());
            let width = 30;
            let filled = ((frac * width as f64) as usize).min(width);
            let mut label = self.label.clone();
            label.truncate(60);
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {:3}% {} {} | {}",
                "#".repeat(filled),
                ".".repeat(width - filled),
                pct,
                fmt_secs(elapsed.as_secs_f64()),
                eta,
                label
            );
        } else if force || pct >= self.last_logged_pct + 5 {
            self.last_logged_pct = pct - pct % 5;
            let _ = writeln!(
                err,
                "[{pct:3}%] {} {eta} | {}",
                fmt_secs(elapsed.as_secs_f64()),
                self.label
            );
        }
        let _ = err.flush();
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
