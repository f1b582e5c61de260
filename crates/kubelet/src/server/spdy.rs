//! A small SPDY/3.1 client for the container runtime's streaming server, and the bridge from a
//! caller's WebSocket `v5.channel.k8s.io` session to it.
//!
//! containerd 1.6's streaming server speaks the remotecommand protocol `v4.channel.k8s.io` over
//! SPDY and over WebSocket, but not `v5.channel.k8s.io`, which kubectl 1.30+ asks for. Version 5
//! adds one thing over WebSocket version 4: the client can half-close stdin (message
//! `[255, 0]`), which WebSocket v4 cannot express. So, like kube-apiserver's stream translator
//! (KEP-4006, <https://github.com/kubernetes/enhancements/tree/master/keps/sig-api-machinery/4006-transition-spdy-to-websockets>),
//! the kubelet terminates the caller's WebSocket and talks SPDY to the runtime, where a stream
//! half-close is a data frame with `FLAG_FIN`.
//!
//! Only what that needs is implemented (<https://www.chromium.org/spdy/spdy-protocol/spdy-protocol-draft3-1/>):
//! SYN_STREAM to open client streams, DATA frames both ways, PING answered, GOAWAY and the end of
//! the connection end the session. Header blocks sent are one zlib stream made of uncompressed
//! ("stored") deflate blocks, each header block ended by an empty stored block (a sync flush),
//! which every zlib reader accepts; header blocks received (SYN_REPLY)
//! are not needed and skipped undecoded. Flow control (WINDOW_UPDATE) is ignored, as by the
//! runtime's own SPDY library.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// SPDY control frame type SYN_STREAM.
pub const SYN_STREAM: u16 = 1;
/// SPDY control frame type PING.
pub const PING: u16 = 6;
/// SPDY control frame type GOAWAY.
pub const GOAWAY: u16 = 7;
/// Frame flag: last frame of the sender's side of the stream.
pub const FLAG_FIN: u8 = 0x01;
/// Largest frame payload accepted from the runtime (bytes).
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The remotecommand channel numbers of WebSocket `*.channel.k8s.io` messages (first byte).
pub mod channel {
    /// Standard input, caller → container.
    pub const STDIN: u8 = 0;
    /// Standard output, container → caller.
    pub const STDOUT: u8 = 1;
    /// Standard error, container → caller.
    pub const STDERR: u8 = 2;
    /// The final `metav1.Status` of the session (exit code), container → caller.
    pub const ERROR: u8 = 3;
    /// Terminal size changes (`{"Width":W,"Height":H}`), caller → container.
    pub const RESIZE: u8 = 4;
    /// v5 only: `[255, n]` half-closes channel `n`.
    pub const CLOSE: u8 = 255;
}

/// One SPDY frame read from the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A data frame of `stream_id`.
    Data {
        /// Stream the data belongs to.
        stream_id: u32,
        /// Frame flags (`FLAG_FIN`).
        flags: u8,
        /// Payload.
        data: Vec<u8>,
    },
    /// A control frame (SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE).
    Control {
        /// Control frame type.
        kind: u16,
        /// Frame flags.
        flags: u8,
        /// Payload, undecoded.
        payload: Vec<u8>,
    },
}

fn frame_length(len: usize) -> [u8; 3] {
    let l = len as u32;
    [(l >> 16) as u8, (l >> 8) as u8, l as u8]
}

/// Encodes a control frame of `kind` (SPDY version 3).
pub fn control_frame(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&[0x80, 0x03]);
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&frame_length(payload.len()));
    out.extend_from_slice(payload);
    out
}

/// Encodes a data frame; payloads above 16 MiB - 1 are the caller's error (they are split by
/// [`data_frames`]).
pub fn data_frame(stream_id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + data.len());
    out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&frame_length(data.len()));
    out.extend_from_slice(data);
    out
}

/// Encodes `data` as data frames of at most 64 KiB each.
pub fn data_frames(stream_id: u32, data: &[u8]) -> Vec<u8> {
    data.chunks(64 * 1024).flat_map(|c| data_frame(stream_id, 0, c)).collect()
}

/// The empty stored deflate block that zlib's `Z_SYNC_FLUSH` emits.
const SYNC_FLUSH: [u8; 5] = [0x00, 0x00, 0x00, 0xff, 0xff];

/// Writes SPDY header blocks as one zlib stream of stored deflate blocks (the stream is shared
/// by every header block of the connection, as SPDY requires).
#[derive(Debug, Default)]
pub struct HeaderEncoder {
    started: bool,
}

impl HeaderEncoder {
    /// The compressed form of a header block with `headers` (names must be lowercase).
    pub fn encode(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = Vec::new();
        plain.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (k, v) in headers {
            plain.extend_from_slice(&(k.len() as u32).to_be_bytes());
            plain.extend_from_slice(k.as_bytes());
            plain.extend_from_slice(&(v.len() as u32).to_be_bytes());
            plain.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 16);
        if !self.started {
            // CMF/FLG: deflate, 32 KiB window, no preset dictionary, check bits valid.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        for chunk in plain.chunks(0xffff) {
            // BFINAL=0, BTYPE=00 (stored), then LEN and its one's complement, little endian.
            out.push(0x00);
            let len = chunk.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // An empty stored block ends the header block, as zlib's Z_SYNC_FLUSH does: it makes the
        // reader hand out the data before it would look for the next block (which only the next
        // header block brings).
        out.extend_from_slice(&SYNC_FLUSH);
        out
    }
}

/// Encodes a SYN_STREAM opening client stream `stream_id` with `headers`.
pub fn syn_stream(enc: &mut HeaderEncoder, stream_id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(&enc.encode(headers));
    control_frame(SYN_STREAM, 0, &payload)
}

/// Reads the next frame; `Ok(None)` at the end of the connection.
///
/// # Errors
/// I/O errors, a frame above 16 MiB, or a connection ending inside a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection ended inside a frame"));
        }
        got += n;
    }
    let flags = head[4];
    let len = (usize::from(head[5]) << 16) | (usize::from(head[6]) << 8) | usize::from(head[7]);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("SPDY frame of {len} bytes")));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    if head[0] & 0x80 != 0 {
        Ok(Some(Frame::Control { kind: u16::from_be_bytes([head[2], head[3]]), flags, payload }))
    } else {
        let stream_id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        Ok(Some(Frame::Data { stream_id, flags, data: payload }))
    }
}

/// Which standard streams a remotecommand session (exec or attach) carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The caller sends standard input.
    pub stdin: bool,
    /// The caller wants standard output.
    pub stdout: bool,
    /// The caller wants standard error (never with a TTY, where it is merged into stdout).
    pub stderr: bool,
    /// The container side has a terminal; a resize stream is opened.
    pub tty: bool,
}

impl StreamOptions {
    /// The SPDY streams to open, in order, as (stream id, `streamType` header, WebSocket
    /// channel): the error stream always, then stdin, stdout, stderr and resize as requested.
    pub fn streams(&self) -> Vec<(u32, &'static str, u8)> {
        let mut out = vec![("error", channel::ERROR)];
        if self.stdin {
            out.push(("stdin", channel::STDIN));
        }
        if self.stdout {
            out.push(("stdout", channel::STDOUT));
        }
        if self.stderr && !self.tty {
            out.push(("stderr", channel::STDERR));
        }
        if self.tty {
            out.push(("resize", channel::RESIZE));
        }
        out.into_iter().enumerate().map(|(i, (t, c))| (2 * i as u32 + 1, t, c)).collect()
    }
}

/// Bridges a caller's WebSocket remotecommand session (`v5.channel.k8s.io`) to an upgraded
/// SPDY connection to the runtime's streaming server (`v4.channel.k8s.io`), until either side
/// ends. Output and the final status are relayed in the order the runtime sent them; the
/// WebSocket is closed once the runtime closes its connection (after the status).
pub async fn bridge<S, R, W>(ws: WebSocketStream<S>, mut upstream_read: R, mut upstream_write: W, opts: StreamOptions)
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let streams = opts.streams();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let mut enc = HeaderEncoder::default();
    let mut opening = Vec::new();
    for (id, kind, _) in &streams {
        opening.extend(syn_stream(&mut enc, *id, &[("streamtype", kind)]));
    }
    let writer = tokio::spawn(async move {
        if upstream_write.write_all(&opening).await.is_err() {
            return;
        }
        while let Some(frame) = rx.recv().await {
            if upstream_write.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = upstream_write.shutdown().await;
    });
    let id_of = |ch: u8| streams.iter().find(|(_, _, c)| *c == ch).map(|(id, _, _)| *id);
    let channel_of = |id: u32| streams.iter().find(|(i, _, _)| *i == id).map(|(_, _, c)| *c);
    let (mut ws_tx, mut ws_rx) = ws.split();
    let pong = tx.clone();
    let down = async {
        // The runtime always ends a session with a Status on the error stream (Success
        // included); without one the caller must not take the silence for success.
        let mut saw_status = false;
        loop {
            match read_frame(&mut upstream_read).await {
                Ok(Some(Frame::Data { stream_id, data, .. })) => {
                    let Some(ch) = channel_of(stream_id) else { continue };
                    if data.is_empty() || !matches!(ch, channel::STDOUT | channel::STDERR | channel::ERROR) {
                        continue;
                    }
                    saw_status |= ch == channel::ERROR;
                    let mut msg = Vec::with_capacity(data.len() + 1);
                    msg.push(ch);
                    msg.extend_from_slice(&data);
                    if ws_tx.send(Message::binary(msg)).await.is_err() {
                        return;
                    }
                }
                Ok(Some(Frame::Control { kind: PING, payload, .. })) => {
                    let _ = pong.send(control_frame(PING, 0, &payload)).await;
                }
                Ok(Some(Frame::Control { kind: GOAWAY, .. })) | Ok(None) | Err(_) => break,
                Ok(Some(Frame::Control { .. })) => {}
            }
        }
        if !saw_status {
            let status = serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "reason": "InternalError",
                "code": 500,
                "message": "the container runtime ended the session without a status",
            });
            let mut msg = vec![channel::ERROR];
            msg.extend_from_slice(status.to_string().as_bytes());
            let _ = ws_tx.send(Message::binary(msg)).await;
        }
        let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        let _ = ws_tx.send(Message::Close(Some(close))).await;
        let _ = ws_tx.close().await;
    };
    let up = async {
        while let Some(Ok(msg)) = ws_rx.next().await {
            let Message::Binary(b) = msg else {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
                continue;
            };
            let Some((&ch, data)) = b.split_first() else { continue };
            let frame = match ch {
                channel::STDIN | channel::RESIZE => match id_of(ch) {
                    Some(id) if !data.is_empty() => data_frames(id, data),
                    _ => continue,
                },
                channel::CLOSE => match data.first().and_then(|c| id_of(*c)) {
                    Some(id) => data_frame(id, FLAG_FIN, &[]),
                    None => continue,
                },
                _ => continue,
            };
            if tx.send(frame).await.is_err() {
                break;
            }
        }
        // The caller closed the session (or the connection broke): the session ends.
    };
    tokio::select! {
        () = down => {}
        () = up => {}
    }
    writer.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn data_frames_read_back_with_their_stream_and_flags() {
        let mut bytes = data_frame(5, FLAG_FIN, b"hello");
        bytes.extend(control_frame(PING, 0, &7u32.to_be_bytes()));
        let mut r = bytes.as_slice();
        assert_eq!(
            read_frame(&mut r).await.ok().flatten(),
            Some(Frame::Data { stream_id: 5, flags: FLAG_FIN, data: b"hello".to_vec() })
        );
        assert_eq!(
            read_frame(&mut r).await.ok().flatten(),
            Some(Frame::Control { kind: PING, flags: 0, payload: 7u32.to_be_bytes().to_vec() })
        );
        assert_eq!(read_frame(&mut r).await.ok().flatten(), None);
        let mut truncated: &[u8] = &data_frame(1, 0, b"abc")[..9];
        assert!(read_frame(&mut truncated).await.is_err());
    }

    #[test]
    fn header_blocks_form_one_zlib_stream_of_stored_blocks() {
        let mut enc = HeaderEncoder::default();
        let first = enc.encode(&[("streamtype", "error")]);
        assert_eq!(&first[..2], &[0x78, 0x01]);
        assert_eq!(u16::from_be_bytes([first[0], first[1]]) % 31, 0, "zlib header check bits");
        let block = &first[2..];
        let len = u16::from_le_bytes([block[1], block[2]]);
        assert_eq!(block[0], 0);
        assert_eq!(!len, u16::from_le_bytes([block[3], block[4]]));
        let plain = &block[5..5 + usize::from(len)];
        assert_eq!(&block[5 + usize::from(len)..], &SYNC_FLUSH, "each header block ends with a sync flush");
        assert_eq!(&plain[..4], &1u32.to_be_bytes());
        assert_eq!(&plain[4..8], &10u32.to_be_bytes());
        assert_eq!(&plain[8..18], b"streamtype");
        // Later blocks continue the same stream: no second zlib header.
        let second = enc.encode(&[("streamtype", "stdout")]);
        assert_eq!(second[0], 0);
    }

    #[test]
    fn streams_are_opened_with_odd_ids_and_no_stderr_under_a_tty() {
        let plain = StreamOptions { stdin: true, stdout: true, stderr: true, tty: false };
        let ids: Vec<(u32, &str)> = plain.streams().iter().map(|(i, t, _)| (*i, *t)).collect();
        assert_eq!(ids, vec![(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")]);
        let tty = StreamOptions { stdin: true, stdout: true, stderr: true, tty: true };
        let kinds: Vec<&str> = tty.streams().iter().map(|(_, t, _)| *t).collect();
        assert_eq!(kinds, vec!["error", "stdin", "stdout", "resize"]);
    }
}
