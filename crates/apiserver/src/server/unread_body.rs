//! Early answers: a request body the handlers left unread is drained, then the answer is sent.
//!
//! A request can be answered before its body has been read to its end: 413 past the size
//! limit, 401/403 before the body matters, 429 from flow control. The handler then drops the
//! body. Over HTTP/2, dropping a body the client is still sending resets the stream — with
//! `CANCEL` when it happens before the answer is queued, so the client sees a broken stream
//! instead of the `Status`. RFC 9113 §8.1 allows an early answer followed by
//! `RST_STREAM(NO_ERROR)`, but clients still uploading (curl among them) report that as a
//! stream error too. So, like an HTTP/1.1 server that reads the rest of a body before reusing
//! the connection, this filter reads and discards what is left, up to
//! [`DRAIN_LIMIT_BYTES`], before the answer goes out; a body larger still is held until the
//! answer has been sent, so that its reset is at least `NO_ERROR` after a complete answer.
//!
//! Over HTTP/1.1 the same holds for a body the handlers began to read (413 past the limit): a
//! connection closed with unread bytes in its receive buffer is reset, and a client still
//! writing sees a broken pipe instead of the answer. A body nobody asked for after
//! `Expect: 100-continue` is left alone: the client has not sent it, and the early answer tells it
//! not to.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use parking_lot::Mutex;

/// How much of a body left unread is read and thrown away before the answer: four times the
/// API's own body limit (`endpoints::request::MAX_BODY_BYTES`), so that any request that was refused for its
/// size still gets its answer cleanly.
pub const DRAIN_LIMIT_BYTES: usize = 4 * crate::endpoints::request::MAX_BODY_BYTES;

/// A request body that was dropped unread, and whether a handler had begun to read it.
struct Parked {
    body: Body,
    polled: bool,
}

/// Where a request body that was dropped unread waits for the response to be sent.
type Parking = Arc<Mutex<Option<Parked>>>;

/// The request body as handlers see it: reads through to the real body; when dropped before
/// its end it parks the real body instead of dropping it.
struct ParkOnDrop {
    inner: Option<Body>,
    polled: bool,
    parking: Parking,
}

impl HttpBody for ParkOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.polled = true;
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(HttpBody::size_hint).unwrap_or_else(|| SizeHint::with_exact(0))
    }
}

impl Drop for ParkOnDrop {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take()
            && !body.is_end_stream()
        {
            *self.parking.lock() = Some(Parked { body, polled: self.polled });
        }
    }
}

/// The response body: the handler's body, holding the parked request body until it is dropped
/// itself, which hyper does after the response's last frame has been queued.
struct HoldParked {
    inner: Body,
    _parking: Parking,
}

impl HttpBody for HoldParked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware (outermost): for a request whose body has not been fully received, drains
/// whatever the handlers leave unread before the answer goes out (see the module docs).
/// Requests without a pending body (every GET, most small writes) pass through.
pub async fn drain_unread_request_body(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let awaits_continue = req.version() < axum::http::Version::HTTP_2
        && req
            .headers()
            .get(axum::http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let parking: Parking = Arc::default();
    let req = req.map(|body| Body::new(ParkOnDrop { inner: Some(body), polled: false, parking: parking.clone() }));
    let response = next.run(req).await;
    let unread = parking.lock().take();
    let Some(Parked { body: mut unread, polled }) = unread else { return response };
    if awaits_continue && !polled {
        // Never asked for, so never sent: nothing to drain.
        return response;
    }
    if drain(&mut unread, DRAIN_LIMIT_BYTES).await {
        return response;
    }
    *parking.lock() = Some(Parked { body: unread, polled });
    response.map(|body| Body::new(HoldParked { inner: body, _parking: parking }))
}

/// Reads and discards `body` until its end or until `limit` bytes; whether the end came.
async fn drain(body: &mut Body, limit: usize) -> bool {
    use http_body_util::BodyExt as _;
    let mut drained = 0;
    while drained <= limit {
        match body.frame().await {
            Some(Ok(frame)) => drained += frame.data_ref().map_or(0, bytes::Buf::remaining),
            Some(Err(_)) => return false,
            None => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_dropped_unread_is_parked_until_the_response_body_is_dropped() {
        // A body whose end never comes, as a client's still being sent.
        let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let parking: Parking = Arc::default();
        let request_body = ParkOnDrop { inner: Some(body), polled: false, parking: parking.clone() };
        drop(request_body);
        assert!(parking.lock().is_some(), "the unread body is parked, not dropped");
        let response = HoldParked { inner: Body::empty(), _parking: parking.clone() };
        assert_eq!(Arc::strong_count(&parking), 2);
        drop(response);
        assert_eq!(Arc::strong_count(&parking), 1, "the response body released the parked request body");
    }

    #[tokio::test]
    async fn draining_stops_at_the_limit_and_reports_whether_the_body_ended() {
        let mut short = Body::from(vec![0u8; 1000]);
        assert!(drain(&mut short, 4096).await, "a body under the limit is read to its end");
        let chunks = futures::stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from(vec![0u8; 1024])));
        let mut endless = Body::from_stream(chunks);
        assert!(!drain(&mut endless, 4096).await, "an endless body is given up on past the limit");
    }

    /// A router behind the middleware whose one route answers 403 without reading the body.
    fn refusing_router() -> axum::Router {
        axum::Router::new()
            .route("/", axum::routing::post(|| async { axum::http::StatusCode::FORBIDDEN }))
            .layer(axum::middleware::from_fn(drain_unread_request_body))
    }

    fn request(version: axum::http::Version, expect_continue: bool, body: Body) -> Request {
        let mut builder = axum::http::Request::post("/").version(version);
        if expect_continue {
            builder = builder.header("expect", "100-continue");
        }
        builder.body(body).unwrap()
    }

    #[tokio::test]
    async fn an_http1_early_answer_reads_the_rest_of_a_body_the_client_sends_anyway() {
        use tower::ServiceExt as _;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        tx.send(Ok(Bytes::from_static(b"{\"kind\":"))).await.unwrap();
        let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        let answer = tokio::spawn(refusing_router().oneshot(request(axum::http::Version::HTTP_11, false, body)));
        tokio::task::yield_now().await;
        assert!(!answer.is_finished(), "the answer waits for the rest of the body");
        tx.send(Ok(Bytes::from_static(b"\"ConfigMap\"}"))).await.unwrap();
        drop(tx);
        let response = answer.await.unwrap().unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn an_http1_body_never_asked_for_after_expect_100_continue_is_not_waited_for() {
        use tower::ServiceExt as _;
        // The client waits for 100 Continue before sending: this body would never come.
        let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let response = refusing_router().oneshot(request(axum::http::Version::HTTP_11, true, body)).await.unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_not_parked() {
        let parking: Parking = Arc::default();
        let request_body = ParkOnDrop { inner: Some(Body::from("done")), polled: false, parking: parking.clone() };
        let bytes = http_body_util::BodyExt::collect(request_body).await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"done");
        assert!(parking.lock().is_none());
    }
}
