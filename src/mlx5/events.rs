//! Asynchronous events of an open device (`ibv_get_async_event(3)`): a fatal device error and
//! port state changes. VPP reads them when the context's `async_fd` turns readable
//! (`rdma_async_event_read_ready`, the fd made non-blocking in `rdma_async_event_init`), DPDK in
//! its interrupt handler (`mlx5_dev_interrupt_handler`); rawpkt has no event loop of its own, so
//! one thread per port waits on the fd (and on a pipe that stops it) and records what happened
//! in [`Health`], which the port's queues read on their idle paths.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rdma_abi::*;

use crate::sys::rdma::Context;

/// What the device has reported so far.
#[derive(Default)]
pub(crate) struct Health {
    fatal: AtomicBool,
    /// `IBV_EVENT_PORT_ERR` / `IBV_EVENT_PORT_ACTIVE` for the port, in all.
    port_events: AtomicU64,
}

impl Health {
    /// `IBV_EVENT_DEVICE_FATAL` came: the device has stopped (the kernel's mlx5 driver moves it
    /// to the internal-error state and stops its DMA), and every queue on it is dead.
    pub(super) fn fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    pub(super) fn port_events(&self) -> u64 {
        self.port_events.load(Ordering::Relaxed)
    }
}

/// The thread reading one context's events; stopped and joined on drop.
pub(crate) struct Watcher {
    wake: libc::c_int,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `ctx` for events of port `port_num`; None (nothing watched, said once on
    /// stderr) where libibverbs lacks `ibv_get_async_event` or the fds cannot be set up.
    pub(super) fn start(ctx: Arc<Context>, port_num: u8, spec: String, health: Arc<Health>) -> Option<Watcher> {
        let fd = ctx.async_fd();
        ctx.get_async_event_fn()?;
        let mut pipe = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into the array; the context's async fd is made
        // non-blocking as VPP does (an event read must never block the watcher's stop).
        let ok = unsafe {
            libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) == 0 && {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
            }
        };
        if !ok {
            log::warn!(
                "{spec}: device events are not watched ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let stop = pipe[0];
        let thread = std::thread::Builder::new()
            .name("rawpkt-events".into())
            .spawn(move || watch(&ctx, fd, stop, port_num, &spec, &health))
            .ok()?;
        Some(Watcher {
            wake: pipe[1],
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: the write end of our pipe; closing it wakes the watcher's poll (POLLHUP).
        unsafe { libc::close(self.wake) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(ctx: &Context, fd: libc::c_int, stop: libc::c_int, port_num: u8, spec: &str, health: &Health) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n < 0 || fds[1].revents != 0 {
            break;
        }
        while let Some((ty, port)) = ctx.next_async_event() {
            match ty {
                // Said once, however often the device repeats it.
                IBV_EVENT_DEVICE_FATAL if !health.fatal.swap(true, Ordering::AcqRel) => {
                    log::warn!(
                        "{spec}: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL); its queues are stopped"
                    );
                }
                IBV_EVENT_PORT_ERR | IBV_EVENT_PORT_ACTIVE if port == i32::from(port_num) => {
                    health.port_events.fetch_add(1, Ordering::Relaxed);
                    let state = if ty == IBV_EVENT_PORT_ERR { "down" } else { "up" };
                    log::info!("{spec}: link {state} (port {port_num})");
                }
                _ => {}
            }
        }
    }
    // SAFETY: the read end of our pipe, closed once here.
    unsafe { libc::close(stop) };
}
