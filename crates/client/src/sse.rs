//! The reader of `text/event-stream` bodies, the one SSE parser of taskmesh's clients: it takes
//! the bytes as they arrive and returns each event once its blank line came.

/// One event of an SSE stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The last `id` field of the event, when it had one.
    pub id: Option<String>,
    /// The `event` field (the event's type), when it had one.
    pub event: Option<String>,
    /// The `data` fields of the event joined with `\n`; empty for an event without data (a
    /// priming event that only carries an `id` or a `retry`).
    pub data: Vec<u8>,
    /// The `retry` field, in milliseconds, when it had a valid one.
    pub retry: Option<u64>,
}

/// Splits an SSE body into its events. Lines end in `\n`, `\r\n` or `\r`; `data` fields of
/// one event are joined with `\n`; comments and unknown fields are skipped; an event is
/// returned when it had at least one field (a block of comments alone is no event).
#[derive(Debug)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<SseEvent>,
    max: usize,
}

/// An event whose data grew past the bound given to [`SseParser::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an SSE event is larger than allowed")
    }
}

impl std::error::Error for TooLarge {}

impl SseParser {
    /// A parser that refuses an event (or an unfinished line) of more than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            event: None,
            max,
        }
    }

    /// Take `chunk` and return every event it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, TooLarge> {
        let mut out = Vec::new();
        self.feed_into(chunk, &mut out)?;
        Ok(out)
    }

    /// [`SseParser::feed`], appending the completed events to `out`.
    pub fn feed_into(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        self.buf.extend_from_slice(chunk);
        let buf = std::mem::take(&mut self.buf);
        let mut start = 0;
        let result = loop {
            let Some(len) = buf[start..].iter().position(|b| *b == b'\n' || *b == b'\r') else {
                break Ok(());
            };
            let end = start + len;
            // A `\r` at the end of the buffer may be the first half of `\r\n`: wait for more.
            if buf[end] == b'\r' && end + 1 == buf.len() {
                break Ok(());
            }
            let skip = if buf[end] == b'\r' && buf.get(end + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
            if let Err(e) = self.line(&buf[start..end], out) {
                break Err(e);
            }
            start = end + skip;
        };
        self.buf = buf;
        self.buf.drain(..start);
        result?;
        if self.buf.len() > self.max {
            return Err(TooLarge);
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        if line.is_empty() {
            if let Some(e) = self.event.take() {
                out.push(e);
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        let text = || String::from_utf8_lossy(value).into_owned();
        match field {
            b"data" => {
                let e = self.event.get_or_insert_with(SseEvent::default);
                if !e.data.is_empty() {
                    e.data.push(b'\n');
                }
                e.data.extend_from_slice(value);
                if e.data.len() > self.max {
                    return Err(TooLarge);
                }
            }
            b"id" => self.event.get_or_insert_with(SseEvent::default).id = Some(text()),
            b"event" => self.event.get_or_insert_with(SseEvent::default).event = Some(text()),
            b"retry" => {
                let e = self.event.get_or_insert_with(SseEvent::default);
                if let Ok(ms) = text().parse() {
                    e.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_however_the_bytes_arrive() {
        let body = b": comment\r\nid: 1\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nretry: 5\n\ndata: x\n\n: ping\n\n";
        for cut in 0..body.len() {
            let mut r = SseParser::new(1024);
            let mut got = r.feed(&body[..cut]).unwrap();
            got.extend(r.feed(&body[cut..]).unwrap());
            let want = vec![
                SseEvent {
                    id: Some("1".into()),
                    event: Some("message".into()),
                    data: b"{\"a\":\n1}".to_vec(),
                    retry: None,
                },
                SseEvent {
                    retry: Some(5),
                    ..SseEvent::default()
                },
                SseEvent {
                    data: b"x".to_vec(),
                    ..SseEvent::default()
                },
            ];
            assert_eq!(got, want, "cut at {cut}");
        }
    }

    #[test]
    fn an_event_past_the_bound_is_refused() {
        let mut r = SseParser::new(8);
        assert!(r.feed(b"data: 0123456789\n\n").is_err());
        let mut r = SseParser::new(8);
        assert!(
            r.feed(b"data: 0123456789").is_err(),
            "an unfinished line counts too"
        );
    }
}
