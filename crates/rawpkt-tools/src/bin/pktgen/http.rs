//! The small HTTP/1.1 server behind `--metrics` and `--control`: one thread per endpoint serves
//! every connection at once from a poll(2) loop over non-blocking sockets, one request a
//! connection (`Connection: close`), on a loopback address only.
//!
//! No client can hold an endpoint up: each connection has [`DEADLINE`] from its accept to the
//! last byte of its answer (a client that sends its request a byte at a time, or never, is cut
//! off then), a request is at most [`MAX_REQUEST`] bytes, head and body (`Content-Length`; a
//! chunked body is refused), and at most [`MAX_CONNECTIONS`] are open: a new one beyond that
//! closes the oldest that has sent nothing yet (else the oldest), so idle connections cannot fill
//! the listen backlog and shut other clients out.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long a connection has, from its accept to the last byte of the answer: a client sends
/// its request at once (Prometheus's scrape timeout is 10 s by default, and it expects an answer
/// well within it; curl sends a request in one write).
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);
/// Connections open at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Longest request read, head and body: a request line, headers and a small JSON body.
pub(crate) const MAX_REQUEST: usize = 4096;

/// `OPTION ADDR`: a loopback address and port. Anything else is refused: the endpoints have no
/// authentication, and a generator's counters and controls are nobody else's business.
pub(crate) fn parse_loopback(option: &str, s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s
        .parse()
        .map_err(|_| format!("{option} {s:?}: expected a loopback address and port, like 127.0.0.1:9101"))?;
    if !a.ip().is_loopback() {
        return Err(format!(
            "{option} {s}: serves only on a loopback address (127.0.0.0/8 or ::1): it has no authentication"
        ));
    }
    Ok(a)
}

/// A request as the handler sees it.
pub(crate) struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub body: &'a [u8],
}

/// An answer: status line text (`200 OK`), content type, body.
pub(crate) struct Response {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    fn bytes(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            self.status,
            self.content_type,
            self.body.len(),
            self.body
        )
        .into_bytes()
    }
}

/// Binds now (so that a port in use is one line before the run), serves from a thread that
/// lives as long as the process. Returns the address bound (the port the system chose, when
/// port 0 was asked). `option` names the option in messages.
pub(crate) fn serve<H>(option: &str, addr: SocketAddr, handler: H) -> Result<SocketAddr, String>
where
    H: Fn(&Request) -> Response + Send + 'static,
{
    let l = TcpListener::bind(addr).map_err(|e| format!("{option} {addr}: {e}"))?;
    let bound = l.local_addr().map_err(|e| format!("{option} {addr}: {e}"))?;
    l.set_nonblocking(true).map_err(|e| format!("{option} {addr}: {e}"))?;
    std::thread::spawn(move || Server::default().run(&l, &handler));
    Ok(bound)
}

/// One client: its request so far, then its answer as it is written out.
struct Conn {
    stream: TcpStream,
    accepted: Instant,
    request: Vec<u8>,
    /// The answer and how much of it is written, once the request is whole.
    answer: Option<(Vec<u8>, usize)>,
}

#[derive(Default)]
struct Server {
    conns: Vec<Conn>,
}

impl Server {
    fn run(&mut self, l: &TcpListener, h: &dyn Fn(&Request) -> Response) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            fds.clear();
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            for c in &self.conns {
                let events = if c.answer.is_some() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                fds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
            // Until the next deadline, and at least once a second.
            let now = Instant::now();
            let wait = self
                .conns
                .iter()
                .map(|c| (c.accepted + DEADLINE).saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            if rawpkt_tools::poll(&mut fds, wait.as_millis() as i32 + 1).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
            // The connections first (those the poll was over), then the new ones.
            let ready: Vec<bool> = fds[1..].iter().map(|p| p.revents != 0).collect();
            for (c, ready) in self.conns.iter_mut().zip(ready) {
                if ready {
                    c.step(h);
                }
            }
            let now = Instant::now();
            self.conns.retain(|c| !c.done() && now < c.accepted + DEADLINE);
            self.accept(l, h);
        }
    }

    /// Takes every connection waiting, serving each at once if its request is already there.
    fn accept(&mut self, l: &TcpListener, h: &dyn Fn(&Request) -> Response) {
        loop {
            let stream = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Out of descriptors (EMFILE), or the client gone (ECONNABORTED): the next
                // poll tries again.
                Err(_) => return,
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() >= MAX_CONNECTIONS {
                let oldest = |quiet: bool| {
                    self.conns
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| !quiet || c.request.is_empty())
                        .min_by_key(|(_, c)| c.accepted)
                        .map(|(i, _)| i)
                };
                if let Some(i) = oldest(true).or_else(|| oldest(false)) {
                    self.conns.swap_remove(i);
                }
            }
            let mut c = Conn {
                stream,
                accepted: Instant::now(),
                request: Vec::new(),
                answer: None,
            };
            c.step(h);
            if !c.done() {
                self.conns.push(c);
            }
        }
    }
}

impl Conn {
    /// Reads what has come of the request; once it is whole, writes what the socket takes of
    /// the answer.
    fn step(&mut self, h: &dyn Fn(&Request) -> Response) {
        if self.answer.is_none() {
            let mut buf = [0u8; 1024];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => {
                        // The client closed its side: answer what came, if anything.
                        if self.request.is_empty() {
                            self.answer = Some((Vec::new(), 0));
                            return;
                        }
                        break;
                    }
                    Ok(n) => {
                        self.request.extend_from_slice(&buf[..n]);
                        if self.request.len() >= MAX_REQUEST || answerable(&self.request) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => {
                        self.answer = Some((Vec::new(), 0));
                        return;
                    }
                }
            }
            self.answer = Some((respond(&self.request, h).bytes(), 0));
        }
        if let Some((out, sent)) = self.answer.as_mut() {
            while *sent < out.len() {
                match self.stream.write(&out[*sent..]) {
                    Ok(0) => {
                        *sent = out.len();
                    }
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => *sent = out.len(),
                }
            }
        }
    }

    /// The answer is out (or the client is gone): the connection closes.
    fn done(&self) -> bool {
        self.answer.as_ref().is_some_and(|(out, sent)| *sent >= out.len())
    }
}

/// Where the head of `req` ends (after its empty line) and its body's length
/// (`Content-Length`, 0 without one), once the head is whole; `None` before.
fn head(req: &[u8]) -> Option<(usize, usize)> {
    let end = req
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .or_else(|| req.windows(2).position(|w| w == b"\n\n").map(|p| p + 2))?;
    let text = String::from_utf8_lossy(&req[..end]);
    let len = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .map_or(Some(0), |(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(usize::MAX);
    Some((end, len))
}

/// Whether `req` can be answered: it is whole, or its head says a body longer than a request
/// may be (answered at once, not after the deadline).
fn answerable(req: &[u8]) -> bool {
    whole(req).is_some() || head(req).is_some_and(|(end, len)| end.saturating_add(len) > MAX_REQUEST)
}

/// Whether `req` holds a whole request (head, and as much body as it says): its length.
fn whole(req: &[u8]) -> Option<usize> {
    let (end, len) = head(req)?;
    let total = end.checked_add(len)?;
    (req.len() >= total).then_some(total)
}

fn text(status: &'static str, body: String) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body,
    }
}

/// The answer to the bytes of a request: the handler's for a whole one, else why not.
fn respond(req: &[u8], h: &dyn Fn(&Request) -> Response) -> Response {
    let Some((end, len)) = head(req) else {
        return text(
            "400 Bad Request",
            format!("a request is at most {MAX_REQUEST} bytes, head and body\n"),
        );
    };
    let head_text = std::str::from_utf8(&req[..end]).unwrap_or("");
    if head_text.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("transfer-encoding"))
    }) {
        return text("411 Length Required", "send the body with a Content-Length\n".into());
    }
    if len == usize::MAX || end.saturating_add(len) > MAX_REQUEST {
        return text(
            "413 Content Too Large",
            format!("a request is at most {MAX_REQUEST} bytes, head and body\n"),
        );
    }
    if req.len() < end + len {
        return text(
            "400 Bad Request",
            "the body is shorter than its Content-Length\n".into(),
        );
    }
    let line = head_text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    h(&Request {
        method,
        path,
        body: &req[end..end + len],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(parse_loopback("--x", "127.0.0.1:9101").is_ok());
        assert!(parse_loopback("--x", "[::1]:9101").is_ok());
        assert!(parse_loopback("--x", "0.0.0.0:9101").unwrap_err().contains("loopback"));
        assert!(parse_loopback("--x", "localhost")
            .unwrap_err()
            .contains("expected a loopback address"));
    }

    #[test]
    fn requests_end_with_their_head_or_their_body() {
        assert_eq!(whole(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Some(27));
        assert_eq!(whole(b"POST /stop HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}"), None);
        assert_eq!(whole(b"POST /stop HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}"), Some(44));
        assert_eq!(whole(b"GET / HTTP/1.1\r\n"), None);
        assert!(answerable(b"POST / HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n"));
        assert!(!answerable(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}"));
        let echo = |r: &Request| {
            text(
                "200 OK",
                format!("{} {} {}", r.method, r.path, String::from_utf8_lossy(r.body)),
            )
        };
        assert_eq!(
            respond(b"POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", &echo).body,
            "POST /a {}"
        );
        assert!(respond(b"POST /a HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", &echo)
            .status
            .starts_with("413"));
        assert!(respond(b"POST /a HTTP/1.1\r\nContent-Length: x\r\n\r\n", &echo)
            .status
            .starts_with("413"));
        assert!(
            respond(b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &echo)
                .status
                .starts_with("411")
        );
        assert!(respond(b"GET / HTTP/1.1\r\nHost", &echo).status.starts_with("400"));
    }
}
