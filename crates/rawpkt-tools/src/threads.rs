//! A tool's threads for one run: each says once whether it came up, all stop together, and the
//! main thread watches them, printing stats lines, until Ctrl-C, a deadline or one ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use super::stats::Ticker;
use super::Fail;

/// A thread's answer: did its set-up work.
type Answer = Result<(), Fail>;

/// Where a thread says, once, whether its set-up worked; dropping it unsaid counts as dying.
pub struct Ready(mpsc::Sender<Answer>);

impl Ready {
    /// Says whether the set-up worked (a copy of its failure), and lets the waiting go on.
    pub fn say<T>(self, setup: &Result<T, Fail>) {
        let _ = self.0.send(setup.as_ref().map(|_| ()).map_err(Fail::clone));
    }
}

/// Threads in one scope tied to one `halt` flag: any of them that ends, a panic included, sets
/// it, so that none runs on beside one that died (and the scope, which joins them, returns).
pub struct Crew<'s, 'e, T> {
    scope: &'s Scope<'s, 'e>,
    halt: &'s AtomicBool,
    threads: Vec<ScopedJoinHandle<'s, Result<T, Fail>>>,
    /// The answers of the threads started since the last [`Crew::wait`].
    ready: (Option<mpsc::Sender<Answer>>, mpsc::Receiver<Answer>),
    waiting: usize,
}

impl<'s, 'e, T: Send + 's> Crew<'s, 'e, T> {
    pub fn new(scope: &'s Scope<'s, 'e>, halt: &'s AtomicBool) -> Self {
        let (tx, rx) = mpsc::channel();
        let (threads, waiting) = (Vec::new(), 0);
        Crew {
            scope,
            halt,
            threads,
            ready: (Some(tx), rx),
            waiting,
        }
    }

    /// Starts `f` on a thread named `name`, pinned to `cpu` if one is given (a CPU that refuses
    /// is a warning: it runs unpinned); `f` must answer once on the [`Ready`] it is given.
    pub fn spawn(
        &mut self,
        name: String,
        cpu: Option<usize>,
        f: impl FnOnce(Ready) -> Result<T, Fail> + Send + 's,
    ) -> Result<(), Fail> {
        let (halt, ready) = (self.halt, Ready(self.ready.0.clone().expect("a sender until wait")));
        let who = name.clone();
        let run = move || {
            let _halt = rawpkt_sys::signal::SetOnDrop(halt);
            if let Some(cpu) = cpu.filter(|c| !super::cpu::pin(*c)) {
                rawpkt_sys::errln!("warning: {who}: could not pin to CPU {cpu}; running unpinned");
            }
            f(ready)
        };
        let started = std::thread::Builder::new().name(name).spawn_scoped(self.scope, run);
        self.threads
            .push(started.map_err(|e| Fail::Runtime(format!("cannot start a thread: {e}")))?);
        self.waiting += 1;
        Ok(())
    }

    /// Waits for every thread started since the last call to say whether it came up. If one
    /// did not, stops and joins them all (the answer's failure comes first).
    pub fn wait(&mut self) -> Result<(), Fail> {
        self.ready.0 = None;
        let answers: Vec<_> = self.ready.1.iter().take(self.waiting).collect();
        let died = answers.len() < self.waiting;
        let (tx, rx) = mpsc::channel();
        (self.ready, self.waiting) = ((Some(tx), rx), 0);
        let mut up = answers.into_iter().collect::<Result<Vec<()>, _>>().map(drop);
        if died {
            up = up.and(Err(Fail::Runtime("a thread died during set-up".into())));
        }
        if up.is_err() {
            self.halt.store(true, Ordering::Relaxed);
            for t in std::mem::take(&mut self.threads) {
                let _ = t.join();
            }
        }
        up
    }

    /// The main thread's part while the crew runs: until Ctrl-C (it prints `interrupted`), the
    /// deadline, or a thread ends. Calls `line(seconds since start, seconds since the last line)`
    /// whenever `ticker` says a stats line is due.
    pub fn watch(&self, deadline: Option<Instant>, ticker: &mut Ticker, mut line: impl FnMut(f64, f64)) {
        let stop = rawpkt_sys::signal::stop_flag();
        while !self.halt.load(Ordering::Relaxed) {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) {
                rawpkt_sys::outln!("interrupted");
                break;
            }
            if deadline.is_some_and(|d| now >= d) || self.threads.iter().any(|t| t.is_finished()) {
                break;
            }
            if let Some((at, secs)) = ticker.due(now) {
                line(at, secs);
            }
            let wake = [ticker.next(), deadline].into_iter().flatten();
            let wake = wake.fold(now + Duration::from_millis(50), Instant::min);
            std::thread::sleep(wake.saturating_duration_since(now));
        }
    }

    /// Stops the threads and joins them: what each returned, in the order they started, or the
    /// first failure.
    pub fn join(mut self) -> Result<Vec<T>, Fail> {
        self.halt.store(true, Ordering::Relaxed);
        let mut out = Ok(Vec::new());
        for t in std::mem::take(&mut self.threads) {
            let name = t.thread().name().unwrap_or("a thread").to_string();
            let r = t
                .join()
                .unwrap_or_else(|_| Err(Fail::Runtime(format!("{name} panicked"))));
            match (&mut out, r) {
                (Ok(all), Ok(t)) => all.push(t),
                (Ok(_), Err(e)) => out = Err(e),
                (Err(_), _) => {}
            }
        }
        out
    }
}

/// However the main thread leaves the scope (a failure returned early, a panic), the threads
/// stop: the scope joins them before it returns, and they run until `halt`.
impl<T> Drop for Crew<'_, '_, T> {
    fn drop(&mut self) {
        self.halt.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that fails its set-up, and one that dies before answering, end the wait with a
    /// failure, and the ones that came up are stopped and joined rather than left spinning.
    #[test]
    fn a_failed_or_dead_thread_stops_the_crew() {
        let halt = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            let mut crew = Crew::new(s, &halt);
            let spin = |ready: Ready| {
                ready.say(&Ok::<(), Fail>(()));
                while !halt.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
                Ok(1)
            };
            crew.spawn("up".into(), None, spin)?;
            crew.spawn("dies".into(), None, |_ready| -> Result<i32, Fail> { panic!("set-up") })?;
            crew.wait()
        });
        assert!(matches!(r, Err(Fail::Runtime(m)) if m.contains("died during set-up")));
        halt.store(false, Ordering::Relaxed);
        let r = std::thread::scope(|s| {
            let mut crew = Crew::new(s, &halt);
            crew.spawn("bad".into(), None, |ready| {
                let setup = Err::<i32, _>(Fail::Usage("no queue".into()));
                ready.say(&setup);
                setup
            })?;
            crew.wait()
        });
        assert!(matches!(r, Err(Fail::Usage(m)) if m == "no queue"));
    }

    /// Once up, the crew runs until one thread ends; join gives each result in order, or the
    /// first failure.
    #[test]
    fn the_watch_ends_with_a_thread_and_join_gives_the_results() {
        let halt = AtomicBool::new(false);
        let got = std::thread::scope(|s| {
            let mut crew = Crew::new(s, &halt);
            for i in 0..3 {
                let halt = &halt;
                crew.spawn(format!("t{i}"), None, move |ready| {
                    ready.say(&Ok::<(), Fail>(()));
                    while i > 0 && !halt.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                    Ok(i)
                })?;
            }
            crew.wait()?;
            let mut lines = 0;
            crew.watch(None, &mut Ticker::new(Instant::now(), Duration::ZERO), |_, _| {
                lines += 1
            });
            assert_eq!(lines, 0);
            crew.join()
        });
        assert_eq!(got.unwrap(), vec![0, 1, 2]);
    }
}
