//! A reader of `text/event-stream` bodies: the data of each event, as the bytes arrive.

/// Splits an SSE body into the data of its events. Lines end in `\n`, `\r\n` or `\r`; `data`
/// fields of one event are joined with `\n`; comments and the other fields are skipped.
pub(crate) struct SseReader {
    buf: Vec<u8>,
    data: Option<Vec<u8>>,
    max: usize,
}

/// An event whose data grew past the bound.
#[derive(Debug)]
pub(crate) struct TooLarge;

impl SseReader {
    /// A reader that refuses an event of more than `max` bytes of data.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            data: None,
            max,
        }
    }

    /// Take `chunk` and return the data of every event it completed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, TooLarge> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n' || *b == b'\r') {
            // A `\r` at the end of the buffer may be the first half of `\r\n`: wait for more.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                break;
            }
            let skip = if self.buf[end] == b'\r' && self.buf.get(end + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
            let line: Vec<u8> = self.buf.drain(..end + skip).take(end).collect();
            self.line(&line, &mut out)?;
        }
        if self.buf.len() > self.max {
            return Err(TooLarge);
        }
        Ok(out)
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Vec<u8>>) -> Result<(), TooLarge> {
        if line.is_empty() {
            if let Some(d) = self.data.take() {
                out.push(d);
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
        if field == b"data" {
            let d = self.data.get_or_insert_with(Vec::new);
            if !d.is_empty() {
                d.push(b'\n');
            }
            d.extend_from_slice(value);
            if d.len() > self.max {
                return Err(TooLarge);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_however_the_bytes_arrive() {
        let body = b": comment\r\nid: 1\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nretry: 5\n\ndata: x\n\n";
        for cut in 0..body.len() {
            let mut r = SseReader::new(1024);
            let mut got = r.feed(&body[..cut]).unwrap();
            got.extend(r.feed(&body[cut..]).unwrap());
            assert_eq!(
                got,
                vec![b"{\"a\":\n1}".to_vec(), b"x".to_vec()],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_event_past_the_bound_is_refused() {
        let mut r = SseReader::new(8);
        assert!(r.feed(b"data: 0123456789\n\n").is_err());
        let mut r = SseReader::new(8);
        assert!(
            r.feed(b"data: 0123456789").is_err(),
            "an unfinished line counts too"
        );
    }
}
