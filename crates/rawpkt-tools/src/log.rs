//! The tools' logger: the library's warnings and notes (`log::warn!`, `log::info!`) as
//! `rawpkt: …` lines on stderr, written as every other line of the tools ([`rawpkt_sys::errln!`]:
//! never a panic on a closed stderr). Each tool installs it first thing, with [`init`].

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Info
    }

    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            rawpkt_sys::errln!("rawpkt: {}", r.args());
        }
    }

    fn flush(&self) {}
}

/// Installs the logger, at level info. A second call (or another logger already installed, as
/// in a test harness) changes nothing.
pub fn init() {
    static LOGGER: Stderr = Stderr;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_and_notes_pass_and_debug_does_not() {
        let at = |level| Metadata::builder().level(level).target("rawpkt").build();
        assert!(Stderr.enabled(&at(Level::Warn)) && Stderr.enabled(&at(Level::Info)));
        assert!(!Stderr.enabled(&at(Level::Debug)) && !Stderr.enabled(&at(Level::Trace)));
        init();
        init(); // a second call is no failure
        assert_eq!(log::max_level(), LevelFilter::Info);
    }
}
