//! The framing of a Btrfs send stream on a pipe between the stem and the copier.
//!
//! A frame is one type byte, a 4-byte big-endian length, then that many bytes:
//! - `D` data: 1 to [`MAX_DATA`] bytes of the stream;
//! - `E` end: at most [`MAX_TRAILER`] bytes of JSON, the trailer; nothing follows it;
//! - `A` abort: at most [`MAX_TRAILER`] bytes of UTF-8, why the writer gave up.
//!
//! A stream is complete only when its END frame has been read: an EOF says nothing (a
//! writer that died closes its pipe just as one that finished does). Each side treats the
//! other as untrusted: lengths are checked before anything is allocated, an abort's reason
//! is capped and escaped before anyone shows it, and after an error the reader only repeats
//! that error.

use std::io::{self, Read, Write};

use serde::Serialize;

/// Frame type: data.
pub const DATA: u8 = b'D';
/// Frame type: end, with the trailer.
pub const END: u8 = b'E';
/// Frame type: abort, with the reason.
pub const ABORT: u8 = b'A';
/// The most stream bytes one data frame carries.
pub const MAX_DATA: usize = 1 << 20;
/// The most bytes an end frame's trailer or an abort frame's reason may have.
pub const MAX_TRAILER: usize = 4096;
/// The most bytes of an abort's reason shown in the reader's error.
const REASON_SHOWN: usize = 512;
const HEADER: usize = 5;

fn header(kind: u8, len: usize) -> [u8; HEADER] {
    // Every caller caps `len` at MAX_DATA or MAX_TRAILER first.
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    [kind, len[0], len[1], len[2], len[3]]
}

/// Writes a stream as data frames; [`FrameWriter::end`] or [`FrameWriter::abort`] closes it.
/// Dropped without either, it writes nothing more: the reader sees an EOF without END,
/// which it refuses.
#[derive(Debug)]
pub struct FrameWriter<W: Write> {
    inner: W,
    data_bytes: u64,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(inner: W) -> Self {
        FrameWriter {
            inner,
            data_bytes: 0,
        }
    }

    /// The writer beneath (to change how long it waits, say; writing to it breaks the
    /// framing).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// The stream bytes written so far (the frames' headers not counted).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Close the stream as complete: the END frame with `trailer` as JSON, flushed.
    /// Returns the inner writer (drop it to close the pipe: nothing may follow the END).
    pub fn end(mut self, trailer: &impl Serialize) -> io::Result<W> {
        let json = serde_json::to_vec(trailer).map_err(io::Error::other)?;
        if json.len() > MAX_TRAILER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the trailer is {} bytes of JSON; an end frame holds at most {MAX_TRAILER}",
                    json.len()
                ),
            ));
        }
        self.inner.write_all(&header(END, json.len()))?;
        self.inner.write_all(&json)?;
        self.inner.flush()?;
        Ok(self.inner)
    }

    /// Close the stream as failed: the ABORT frame with `reason` (cut to [`MAX_TRAILER`]
    /// bytes at a character boundary). A reader that is gone is no error here: it has its
    /// own.
    pub fn abort(mut self, reason: &str) {
        let mut cut = reason.len().min(MAX_TRAILER);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let reason = &reason.as_bytes()[..cut];
        let _ = self
            .inner
            .write_all(&header(ABORT, reason.len()))
            .and_then(|()| self.inner.write_all(reason))
            .and_then(|()| self.inner.flush());
    }
}

impl<W: Write> Write for FrameWriter<W> {
    /// One data frame of up to [`MAX_DATA`] bytes of `buf`. An error may leave a frame
    /// half-written: the stream is then broken, and only [`FrameWriter::abort`] (or
    /// dropping) is left to do.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min(MAX_DATA);
        self.inner.write_all(&header(DATA, n))?;
        self.inner.write_all(&buf[..n])?;
        self.data_bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[derive(Debug)]
enum State {
    /// Reading a frame's header; `filled` bytes of it are in `header`.
    Header { filled: usize },
    /// Inside a data frame: this many bytes of it are left.
    Data { left: usize },
    /// Reading an end or abort frame's payload into `payload` (its length known).
    Payload { kind: u8, len: usize },
    /// The END frame was read.
    Ended,
    /// An error was met; every read repeats it.
    Failed {
        kind: io::ErrorKind,
        message: String,
    },
}

/// Reads the stream out of frames: `read` yields the data, and `Ok(0)` only once the END
/// frame is read (then [`FrameReader::trailer`] is the trailer's JSON). An ABORT, an EOF
/// before the END, an unknown frame type or a frame longer than its type allows is an
/// `io::Error` (InvalidData or UnexpectedEof) that says which. Resumable: an inner
/// `WouldBlock` or `Interrupted` loses nothing.
#[derive(Debug)]
pub struct FrameReader<R: Read> {
    inner: R,
    state: State,
    header: [u8; HEADER],
    payload: Vec<u8>,
    trailer: Option<Vec<u8>>,
    data_bytes: u64,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            state: State::Header { filled: 0 },
            header: [0; HEADER],
            payload: Vec::new(),
            trailer: None,
            data_bytes: 0,
        }
    }

    /// The END frame's bytes (the writer's JSON, unchecked), once it was read.
    pub fn trailer(&self) -> Option<&[u8]> {
        self.trailer.as_deref()
    }

    /// Whether the END frame was read (the stream is complete).
    pub fn ended(&self) -> bool {
        matches!(self.state, State::Ended)
    }

    /// The stream bytes read so far.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// After the END: check that the writer closed the pipe with nothing after it. A writer
    /// that goes on past its END is confused or hostile; what it says is not the stream.
    pub fn expect_eof(&mut self) -> io::Result<()> {
        if !self.ended() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the end frame has not been read yet",
            ));
        }
        let mut byte = [0u8; 1];
        loop {
            match self.inner.read(&mut byte) {
                Ok(0) => return Ok(()),
                Ok(_) => {
                    return Err(self.fail(
                        io::ErrorKind::InvalidData,
                        "the writer sent more after its end frame".into(),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The reader beneath (to change how long it waits, say; reading from it breaks the
    /// framing).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    fn fail(&mut self, kind: io::ErrorKind, message: String) -> io::Error {
        self.state = State::Failed {
            kind,
            message: message.clone(),
        };
        io::Error::new(kind, message)
    }

    /// Read more of a header or a payload from the inner reader; an EOF is an
    /// UnexpectedEof saying `what`.
    fn fill(&mut self, which: Fill, what: &str) -> io::Result<usize> {
        let result = match which {
            Fill::Header(filled) => self.inner.read(&mut self.header[filled..]),
            Fill::Payload(len) => {
                let start = self.payload.len();
                self.payload.resize(len, 0);
                let r = self.inner.read(&mut self.payload[start..]);
                let got = *r.as_ref().unwrap_or(&0);
                self.payload.truncate(start + got);
                r
            }
        };
        match result {
            Ok(0) => Err(self.fail(io::ErrorKind::UnexpectedEof, what.to_owned())),
            other => other,
        }
    }
}

enum Fill {
    Header(usize),
    /// The payload's whole length.
    Payload(usize),
}

impl<R: Read> Read for FrameReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.state {
                State::Failed { kind, ref message } => {
                    return Err(io::Error::new(kind, message.clone()))
                }
                State::Ended => return Ok(0),
                State::Data { left } => {
                    if buf.is_empty() {
                        return Ok(0);
                    }
                    let want = left.min(buf.len());
                    let n = match self.inner.read(&mut buf[..want]) {
                        Ok(0) => {
                            return Err(self.fail(
                                io::ErrorKind::UnexpectedEof,
                                "the stream ended inside a data frame, without an end frame: \
                                 the writer stopped or died"
                                    .into(),
                            ))
                        }
                        Ok(n) => n,
                        Err(e) => return Err(e),
                    };
                    self.data_bytes += n as u64;
                    self.state = if n == left {
                        State::Header { filled: 0 }
                    } else {
                        State::Data { left: left - n }
                    };
                    return Ok(n);
                }
                State::Header { filled } => {
                    let what = if filled == 0 {
                        "the stream ended without an end frame: the writer stopped or died"
                    } else {
                        "the stream ended inside a frame's header: the writer stopped or died"
                    };
                    let n = self.fill(Fill::Header(filled), what)?;
                    let filled = filled + n;
                    if filled < HEADER {
                        self.state = State::Header { filled };
                        continue;
                    }
                    let kind = self.header[0];
                    let len = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]) as usize;
                    self.state = match kind {
                        DATA if (1..=MAX_DATA).contains(&len) => State::Data { left: len },
                        DATA => {
                            return Err(self.fail(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "a data frame of {len} bytes; one holds 1 to {MAX_DATA}"
                                ),
                            ))
                        }
                        END | ABORT if len <= MAX_TRAILER => {
                            self.payload.clear();
                            State::Payload { kind, len }
                        }
                        END | ABORT => {
                            let which = if kind == END { "an end" } else { "an abort" };
                            return Err(self.fail(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "{which} frame of {len} bytes; one holds at most {MAX_TRAILER}"
                                ),
                            ));
                        }
                        other => {
                            return Err(self.fail(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "a frame of unknown type {:?}: not this framing, or a broken writer",
                                    char::from(other).escape_default().to_string()
                                ),
                            ))
                        }
                    };
                }
                State::Payload { kind, len } => {
                    if self.payload.len() < len {
                        let what = "the stream ended inside an end or abort frame: the writer \
                                    stopped or died";
                        self.fill(Fill::Payload(len), what)?;
                        continue;
                    }
                    let payload = std::mem::take(&mut self.payload);
                    if kind == END {
                        self.trailer = Some(payload);
                        self.state = State::Ended;
                        return Ok(0);
                    }
                    let reason = String::from_utf8_lossy(&payload);
                    let reason: String = layout::human::cap(&reason, REASON_SHOWN)
                        .escape_debug()
                        .collect();
                    return Err(self.fail(
                        io::ErrorKind::InvalidData,
                        format!("the writer aborted the stream: {reason}"),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// Everything a reader yields, or its error.
    fn read_all(bytes: &[u8]) -> (Vec<u8>, io::Result<Option<Vec<u8>>>) {
        let mut reader = FrameReader::new(bytes);
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return (out, Ok(reader.trailer().map(<[u8]>::to_vec))),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Err(e)),
            }
        }
    }

    fn err_of(bytes: &[u8]) -> io::Error {
        read_all(bytes).1.expect_err("the reader accepted it")
    }

    #[test]
    fn a_stream_round_trips_with_its_trailer() {
        let mut w = FrameWriter::new(Vec::new());
        w.write_all(b"hello ").unwrap();
        w.write_all(b"world").unwrap();
        assert_eq!(w.data_bytes(), 11);
        let bytes = w
            .end(&serde_json::json!({"uuid": "u", "bytes": 11}))
            .unwrap();
        assert_eq!(
            bytes,
            [
                frame(DATA, b"hello "),
                frame(DATA, b"world"),
                frame(END, br#"{"bytes":11,"uuid":"u"}"#)
            ]
            .concat()
        );
        let (data, trailer) = read_all(&bytes);
        assert_eq!(data, b"hello world");
        assert_eq!(trailer.unwrap().unwrap(), br#"{"bytes":11,"uuid":"u"}"#);
    }

    #[test]
    fn big_writes_are_cut_into_frames() {
        let data = vec![7u8; MAX_DATA * 2 + 3];
        let mut w = FrameWriter::new(Vec::new());
        w.write_all(&data).unwrap();
        let bytes = w.end(&()).unwrap();
        assert_eq!(bytes.len(), data.len() + 4 * HEADER + 4);
        assert_eq!(&bytes[..HEADER], &header(DATA, MAX_DATA));
        let (got, trailer) = read_all(&bytes);
        assert_eq!(got, data);
        assert_eq!(trailer.unwrap().unwrap(), b"null");
    }

    #[test]
    fn an_empty_stream_is_just_the_end() {
        let bytes = FrameWriter::new(Vec::new()).end(&"t").unwrap();
        assert_eq!(bytes, frame(END, b"\"t\""));
        assert_eq!(read_all(&bytes).0, b"");
    }

    #[test]
    fn a_trailer_too_long_is_not_written() {
        let long = "x".repeat(MAX_TRAILER);
        let e = FrameWriter::new(Vec::new()).end(&long).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn an_abort_is_an_error_that_says_why() {
        let mut bytes = Vec::new();
        {
            let mut w2 = FrameWriter::new(&mut bytes);
            w2.write_all(b"part").unwrap();
            w2.abort("btrfs send failed: No space\nleft");
        }
        let (data, result) = read_all(&bytes);
        assert_eq!(data, b"part");
        let e = result.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let text = e.to_string();
        assert!(text.contains("aborted"), "{text}");
        // The reason is shown escaped: a newline cannot forge a log line.
        assert!(text.contains("No space\\nleft"), "{text}");
    }

    #[test]
    fn an_abort_reason_is_cut_to_fit_at_a_character() {
        let mut bytes = Vec::new();
        FrameWriter::new(&mut bytes).abort(&"é".repeat(MAX_TRAILER));
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert!(len <= MAX_TRAILER);
        assert!(std::str::from_utf8(&bytes[HEADER..]).is_ok());
        let text = err_of(&bytes).to_string();
        assert!(text.len() < REASON_SHOWN + 200, "{}", text.len());
    }

    #[test]
    fn hostile_abort_reasons_are_shown_safely() {
        let bytes = frame(ABORT, b"\xff\xfe\x1b[2J\0evil");
        let text = err_of(&bytes).to_string();
        assert!(!text.contains('\x1b') && !text.contains('\0'), "{text:?}");
    }

    #[test]
    fn an_eof_is_never_the_end() {
        let whole = [frame(DATA, b"abc"), frame(END, b"{}")].concat();
        // Cut anywhere before the END frame is whole: refused as an unexpected EOF.
        for cut in 0..whole.len() {
            let e = err_of(&whole[..cut]);
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}");
            assert!(e.to_string().contains("ended"), "{e}");
        }
        assert!(read_all(&whole).1.is_ok());
        let e = err_of(&frame(DATA, b"abc"));
        assert!(e.to_string().contains("without an end frame"), "{e}");
        let e = err_of(&frame(DATA, b"abc")[..6]);
        assert!(e.to_string().contains("inside a data frame"), "{e}");
    }

    #[test]
    fn over_long_frames_are_refused_before_being_read() {
        let mut bytes = header(DATA, MAX_DATA + 1).to_vec();
        bytes.extend_from_slice(b"abc");
        let e = err_of(&bytes);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("data frame of 1048577 bytes"), "{e}");
        let e = err_of(&[DATA, 0xff, 0xff, 0xff, 0xff]);
        assert!(e.to_string().contains("data frame of 4294967295"), "{e}");
        let e = err_of(&header(END, MAX_TRAILER + 1));
        assert!(e.to_string().contains("an end frame of 4097"), "{e}");
        let e = err_of(&header(ABORT, MAX_TRAILER + 1));
        assert!(e.to_string().contains("an abort frame of 4097"), "{e}");
        // An empty data frame is no frame.
        let e = err_of(&[frame(DATA, b""), frame(END, b"{}")].concat());
        assert!(e.to_string().contains("data frame of 0 bytes"), "{e}");
    }

    #[test]
    fn unknown_frame_types_are_refused() {
        for kind in [0u8, b'd', b'e', b'X', 0xff, b'\n'] {
            let e = err_of(&[frame(kind, b"x"), frame(END, b"{}")].concat());
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("unknown type"), "{e}");
        }
        // A raw send stream (not framed) is refused at once.
        let e = err_of(b"btrfs-stream\0\x01\0\0\0");
        assert!(e.to_string().contains("unknown type"), "{e}");
    }

    #[test]
    fn data_after_the_end_is_refused_when_looked_for() {
        let bytes = [frame(DATA, b"abc"), frame(END, b"{}"), frame(DATA, b"more")].concat();
        let mut r = FrameReader::new(&bytes[..]);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"abc");
        // Ok(0) again after the END, never the bytes after it.
        assert_eq!(r.read(&mut [0u8; 8]).unwrap(), 0);
        let e = r.expect_eof().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("after its end frame"), "{e}");
        // And the reader stays failed.
        assert!(r.read(&mut [0u8; 8]).is_err());

        let bytes = [frame(DATA, b"abc"), frame(END, b"{}")].concat();
        let mut r = FrameReader::new(&bytes[..]);
        r.read_to_end(&mut Vec::new()).unwrap();
        r.expect_eof().unwrap();
        // Asking before the END is a caller's mistake, refused.
        let mut r = FrameReader::new(&bytes[..]);
        assert!(r.expect_eof().is_err());
    }

    #[test]
    fn after_an_error_the_reader_only_repeats_it() {
        let bytes = [frame(b'Z', b""), frame(DATA, b"abc"), frame(END, b"{}")].concat();
        let mut r = FrameReader::new(&bytes[..]);
        let first = r.read(&mut [0u8; 8]).unwrap_err().to_string();
        for _ in 0..3 {
            assert_eq!(r.read(&mut [0u8; 8]).unwrap_err().to_string(), first);
        }
        assert!(r.trailer().is_none());
    }

    /// A reader that gives at most `step` bytes per read, with WouldBlock and Interrupted
    /// between: the framing must lose nothing across short and failed reads.
    struct Dribble<'a> {
        bytes: &'a [u8],
        step: usize,
        tick: usize,
    }

    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.tick += 1;
            match self.tick % 3 {
                0 => return Err(io::ErrorKind::WouldBlock.into()),
                1 if self.tick % 5 == 1 => return Err(io::ErrorKind::Interrupted.into()),
                _ => {}
            }
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    proptest! {
        #[test]
        fn any_stream_round_trips(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 0..12),
            step in 1usize..64,
            read_size in 1usize..5000,
            trailer in "\\PC{0,100}",
        ) {
            let mut w = FrameWriter::new(Vec::new());
            for chunk in &chunks {
                w.write_all(chunk).unwrap();
            }
            let bytes = w.end(&trailer).unwrap();
            let mut r = FrameReader::new(Dribble { bytes: &bytes, step, tick: 0 });
            let mut out = Vec::new();
            let mut buf = vec![0u8; read_size];
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            prop_assert_eq!(out, chunks.concat());
            prop_assert_eq!(r.data_bytes(), bytes_of(&chunks));
            let got: String = serde_json::from_slice(r.trailer().unwrap()).unwrap();
            prop_assert_eq!(got, trailer);
        }

        #[test]
        fn any_bytes_are_refused_or_read_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (_, result) = read_all(&bytes);
            if let Ok(trailer) = result {
                // Accepted only with an END frame.
                prop_assert!(trailer.is_some());
            }
        }
    }

    fn bytes_of(chunks: &[Vec<u8>]) -> u64 {
        chunks.iter().map(|c| c.len() as u64).sum()
    }
}
