//! An HTTP/2 connection's socket writes, batched: one TLS write per batch of frames instead of one
//! per frame.
//!
//! An event fanned out to the watches multiplexed on one HTTP/2 connection (client-go and kubectl
//! watch that way, <https://www.rfc-editor.org/rfc/rfc9113#section-5>) becomes one DATA frame per
//! stream, each queued by its own stream task. Written through as they come, every frame costs a
//! TLS record and a `writev` (most of the server's CPU per delivery). Here the connection's writes
//! go to a buffer instead ([`BatchedIo`]), and the task running the connection ([`FlushAfterPoll`])
//! writes the buffer to the TLS stream after polling the connection — once it has let the other
//! ready tasks run (one yield), so the frames of every stream task woken by the same event leave
//! in one write. Nothing waits for more than that yield: a batch is written by the next poll of
//! the connection's task, and at once when it reaches [`HIGH_WATER`] bytes.
//!
//! HTTP/1.1 connections carry one response at a time and already write each event once, so they
//! pass writes through ([`BatchedIo::new`] with `batch: false`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes at which a write first drains the buffer to the TLS stream (bytes): bounds the
/// buffer per connection (a slow reader pushes back through the socket as without batching).
pub const HIGH_WATER: usize = 64 * 1024;

struct Shared<T> {
    io: T,
    /// Bytes written by the connection and not yet given to `io`.
    out: Vec<u8>,
    /// How much of `out` `io` has taken.
    sent: usize,
    /// Buffer writes (HTTP/2) or pass them through (HTTP/1.1).
    batch: bool,
    /// A failed write to `io`, reported to the connection on its next read or write.
    failed: Option<io::ErrorKind>,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    /// Writes the buffer to `io` and flushes it.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.sent = 0;
        if self.out.capacity() > 2 * HIGH_WATER {
            // A burst beyond the high-water mark (one large frame): give the memory back.
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn check(&self) -> io::Result<()> {
        match self.failed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        }
    }

    /// Room for `len` more bytes: drains the buffer first when it would pass [`HIGH_WATER`].
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
        self.check()?;
        if !self.out.is_empty() && self.out.len() + len > HIGH_WATER {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The connection's side of a stream (e.g. a TLS stream): reads pass through; writes are
/// buffered until [`FlushAfterPoll`] writes them (or pass through when not batching). Cloning
/// gives another handle on the same stream.
pub struct BatchedIo<T>(Arc<Mutex<Shared<T>>>);

impl<T> Clone for BatchedIo<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> BatchedIo<T> {
    /// Wraps `io`; `batch` buffers writes (to be drained by [`FlushAfterPoll`]), otherwise they
    /// pass through.
    pub fn new(io: T, batch: bool) -> Self {
        Self(Arc::new(Mutex::new(Shared { io, out: Vec::new(), sent: 0, batch, failed: None })))
    }

    /// Runs `conn` (the future serving the connection over this stream), writing what it
    /// buffered after each poll.
    pub fn flush_after_poll<F: Future>(&self, conn: F) -> FlushAfterPoll<F, T> {
        FlushAfterPoll { conn: Box::pin(conn), io: self.clone(), yielded: false, done: None }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for BatchedIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.lock();
        s.check()?;
        Pin::new(&mut s.io).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for BatchedIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut s = self.0.lock();
        if !s.batch {
            return Pin::new(&mut s.io).poll_write(cx, buf);
        }
        ready!(s.poll_room(cx, buf.len()))?;
        s.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut s = self.0.lock();
        if !s.batch {
            return Pin::new(&mut s.io).poll_write_vectored(cx, bufs);
        }
        let len = bufs.iter().map(|b| b.len()).sum();
        ready!(s.poll_room(cx, len))?;
        for b in bufs {
            s.out.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        let s = self.0.lock();
        s.batch || s.io.is_write_vectored()
    }

    /// Batched: the buffer is written after the connection's poll ([`FlushAfterPoll`]), so a
    /// flush asked for in the middle of a batch does not cut it.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.lock();
        if !s.batch {
            return Pin::new(&mut s.io).poll_flush(cx);
        }
        Poll::Ready(s.check())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.lock();
        s.check()?;
        ready!(s.poll_drain(cx))?;
        Pin::new(&mut s.io).poll_shutdown(cx)
    }
}

/// The future serving a connection over a [`BatchedIo`], writing the batch after each poll (see
/// the module documentation); completes with the connection's output once the batch is written.
pub struct FlushAfterPoll<F: Future, T> {
    conn: Pin<Box<F>>,
    io: BatchedIo<T>,
    /// This poll follows a yield made to let the connection's stream tasks add to the batch.
    yielded: bool,
    /// The connection's output, held until the batch is written.
    done: Option<F::Output>,
}

// Nothing is pinned in place: the connection future is boxed, its output only moved.
impl<F: Future, T> Unpin for FlushAfterPoll<F, T> {}

impl<F: Future, T: AsyncRead + AsyncWrite + Unpin> Future for FlushAfterPoll<F, T> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if this.done.is_none()
            && let Poll::Ready(out) = this.conn.as_mut().poll(cx)
        {
            this.done = Some(out);
        }
        let mut s = this.io.0.lock();
        if s.out.is_empty() || s.failed.is_some() {
            this.yielded = false;
            return match this.done.take() {
                Some(out) => Poll::Ready(out),
                None => Poll::Pending,
            };
        }
        if this.done.is_none() && !this.yielded {
            // Let the tasks woken with this one (other streams' bodies) queue their frames:
            // waking itself puts this task at the back of the runtime's run queue.
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.yielded = false;
        match s.poll_drain(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => {
                // The connection sees the failure on its next read or write.
                s.failed = Some(e.kind());
                s.out = Vec::new();
                s.sent = 0;
                if this.done.is_none() {
                    cx.waker().wake_by_ref();
                }
            }
            // The socket is full: its readiness wakes this task, which drains again.
            Poll::Pending => return Poll::Pending,
        }
        match this.done.take() {
            Some(out) => Poll::Ready(out),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A stream recording each write it is given.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        shut: bool,
    }

    impl AsyncRead for Recorder {
        fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.get_mut().writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut = true;
            Poll::Ready(Ok(()))
        }
    }

    fn writes(io: &BatchedIo<Recorder>) -> Vec<Vec<u8>> {
        io.0.lock().io.writes.clone()
    }

    /// A connection writing and flushing `a`, then `b`, then waiting forever.
    async fn two_flushed_writes(mut io: BatchedIo<Recorder>) {
        for part in [b"a", b"b"] {
            io.write_all(part).await.expect("buffered");
            io.flush().await.expect("flushed");
        }
        std::future::pending::<()>().await;
    }

    /// A [`two_flushed_writes`] connection over a recorder (batching or not) and a function
    /// polling it once, which must leave it pending.
    fn two_flushed_writes_connection(batch: bool) -> (BatchedIo<Recorder>, impl FnMut()) {
        let io = BatchedIo::new(Recorder::default(), batch);
        let mut conn = io.flush_after_poll(two_flushed_writes(io.clone()));
        let poll = move || {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(Pin::new(&mut conn).poll(&mut cx).is_pending());
        };
        (io, poll)
    }

    #[test]
    fn writes_of_one_poll_leave_in_one_write_after_a_yield() {
        let (io, mut poll) = two_flushed_writes_connection(true);
        poll();
        assert!(writes(&io).is_empty(), "the first poll yields before writing");
        poll();
        assert_eq!(writes(&io), vec![b"ab".to_vec()]);
        poll();
        assert_eq!(writes(&io).len(), 1, "nothing new: nothing written");
    }

    #[test]
    fn without_batching_every_write_passes_through() {
        let (io, mut poll) = two_flushed_writes_connection(false);
        poll();
        assert_eq!(writes(&io), vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[tokio::test]
    async fn a_finished_connection_writes_its_batch_before_completing_and_shutdown_drains() {
        let io = BatchedIo::new(Recorder::default(), true);
        let mut handle = io.clone();
        io.flush_after_poll(async move { handle.write_all(b"last").await }).await.expect("written");
        assert_eq!(writes(&io), vec![b"last".to_vec()]);
        let mut handle = io.clone();
        handle.write_all(b"bye").await.expect("buffered");
        handle.shutdown().await.expect("shut down");
        assert_eq!(writes(&io).last().map(Vec::as_slice), Some(&b"bye"[..]));
        assert!(io.0.lock().io.shut);
    }

    #[tokio::test]
    async fn a_write_past_the_high_water_mark_drains_the_buffer_first() {
        let io = BatchedIo::new(Recorder::default(), true);
        let mut handle = io.clone();
        handle.write_all(&vec![1; HIGH_WATER]).await.expect("buffered");
        assert!(writes(&io).is_empty());
        handle.write_all(b"more").await.expect("buffered after a drain");
        assert_eq!(writes(&io).iter().map(Vec::len).collect::<Vec<_>>(), vec![HIGH_WATER]);
    }
}
