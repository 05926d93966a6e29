//! Zero-copy forwarding between two plain TCP sockets: `splice(2)` from the broker's socket into a
//! pipe, then from the pipe into the client's socket.
//!
//! Why: the bytes of a consumer's Fetch responses are nearly all record sets, which the proxy never
//! reads. Received into a buffer and sent from it, every byte is copied twice by the kernel (to user
//! space and back); measured with `perf`, those copies were a third of the proxy's CPU while a consumer
//! read through it. Spliced, the kernel moves page references instead. TLS on either side needs the
//! bytes in user space, so only plain TCP to plain TCP is spliced.
//!
//! Linux only; elsewhere [`Pipe::new`] fails and the caller copies.
//!
//! Must not touch: anything but the byte range it is given (the caller has written everything before
//! it and walks everything after it).

#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;

#[cfg(target_os = "linux")]
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
#[cfg(target_os = "linux")]
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

#[cfg(target_os = "linux")]
/// The pipe size asked for (Linux's default `pipe-max-size`); a smaller one is used if refused.
const PIPE_BYTES: i32 = 1 << 20;
#[cfg(target_os = "linux")]
/// The size of a pipe whose size could not be set (Linux's default).
const DEFAULT_PIPE_BYTES: usize = 64 * 1024;

/// A stream half that may be a plain TCP socket, which can then be spliced.
pub(crate) trait AsTcp {
    /// The TCP socket under this half, if it is one without TLS.
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl AsTcp for OwnedReadHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl AsTcp for OwnedWriteHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

/// Halves of TLS streams (and test streams): never spliced.
impl<T> AsTcp for tokio::io::ReadHalf<T> {}
impl<T> AsTcp for tokio::io::WriteHalf<T> {}
/// The client of unit tests.
#[cfg(test)]
impl AsTcp for Vec<u8> {}

/// A splice failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpliceError {
    /// Reading the source socket failed.
    #[error("splicing from the broker's socket failed")]
    Read(#[source] std::io::Error),
    /// The source closed before the range ended.
    #[error("the broker closed the connection with {left} bytes of the range to come")]
    Closed { left: usize },
    /// Writing the destination socket failed.
    #[error("splicing into the client's socket failed")]
    Write(#[source] std::io::Error),
}

/// A non-blocking pipe that spliced bytes go through.
#[derive(Debug)]
pub(crate) struct Pipe {
    #[cfg(target_os = "linux")]
    read: OwnedFd,
    #[cfg(target_os = "linux")]
    write: OwnedFd,
    #[cfg(target_os = "linux")]
    bytes: usize,
}

impl Pipe {
    /// A pipe of [`PIPE_BYTES`] if the system allows, else of its default size.
    ///
    /// # Errors
    /// The pipe could not be created (file descriptors exhausted): the caller copies instead.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new() -> std::io::Result<Self> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// A pipe of [`PIPE_BYTES`] if the system allows, else of its default size.
    ///
    /// # Errors
    /// The pipe could not be created (file descriptors exhausted): the caller copies instead.
    #[cfg(target_os = "linux")]
    pub(crate) fn new() -> std::io::Result<Self> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let bytes = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES)).ok().and_then(|n| usize::try_from(n).ok()).unwrap_or(DEFAULT_PIPE_BYTES);
        Ok(Self { read, write, bytes })
    }
}

/// Elsewhere than Linux: never called, [`Pipe::new`] fails first.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn splice_exact(_: &TcpStream, _: &TcpStream, _: &Pipe, _: usize) -> Result<(), SpliceError> {
    Err(SpliceError::Read(std::io::ErrorKind::Unsupported.into()))
}

/// Moves exactly `n` bytes from `from` to `to` through `pipe`, which must be empty and is left empty.
///
/// The pipe is filled only when empty and then drained completely, so a `WouldBlock` from a splice
/// into it is always the socket's (no data yet), never a full pipe's: the socket's readiness is then
/// correctly cleared and awaited. Draining likewise waits only on the client socket.
///
/// # Errors
/// [`SpliceError`]; part of the range may have been written.
#[cfg(target_os = "linux")]
pub(crate) async fn splice_exact(from: &TcpStream, to: &TcpStream, pipe: &Pipe, mut n: usize) -> Result<(), SpliceError> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    while n > 0 {
        let mut in_pipe = loop {
            from.readable().await.map_err(SpliceError::Read)?;
            match from.try_io(Interest::READABLE, || Ok(splice(from, None, &pipe.write, None, n.min(pipe.bytes), flags)?)) {
                Ok(0) => return Err(SpliceError::Closed { left: n }),
                Ok(k) => break k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(SpliceError::Read(e)),
            }
        };
        n -= in_pipe;
        while in_pipe > 0 {
            to.writable().await.map_err(SpliceError::Write)?;
            match to.try_io(Interest::WRITABLE, || Ok(splice(&pipe.read, None, to, None, in_pipe, flags)?)) {
                Ok(0) => return Err(SpliceError::Write(std::io::ErrorKind::WriteZero.into())),
                Ok(k) => in_pipe -= k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(SpliceError::Write(e)),
            }
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (client, server)
    }

    /// A range larger than the pipe and the socket buffers arrives whole and in order, and the
    /// bytes after it stay in the source socket.
    #[tokio::test]
    async fn moves_exactly_the_range() {
        let (mut broker, from) = pair().await;
        let (to, mut client) = pair().await;
        let data: Vec<u8> = (0..5_000_000_u32).map(|i| (i % 253) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            broker.write_all(&sent).await.expect("write");
            broker.write_all(b"next").await.expect("write");
            broker
        });
        let reader = tokio::spawn(async move {
            let mut got = vec![0; 5_000_000];
            client.read_exact(&mut got).await.expect("read");
            got
        });
        let pipe = Pipe::new().expect("pipe");
        splice_exact(&from, &to, &pipe, data.len()).await.expect("splice");
        assert!(reader.await.expect("reader") == data, "spliced bytes differ");
        let _broker = writer.await.expect("writer");
        let mut rest = [0; 4];
        let mut from = from;
        from.read_exact(&mut rest).await.expect("rest");
        assert_eq!(&rest, b"next");
    }

    #[tokio::test]
    async fn a_source_closing_early_is_an_error() {
        let (mut broker, from) = pair().await;
        let (to, _client) = pair().await;
        broker.write_all(&[7; 1000]).await.expect("write");
        drop(broker);
        let e = splice_exact(&from, &to, &Pipe::new().expect("pipe"), 5000).await.expect_err("closed");
        assert!(matches!(e, SpliceError::Closed { left: 4000 }), "{e:?}");
    }
}
