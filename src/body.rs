//! The bodies: [`WebhookBody`], the verified request body the handler reads, and
//! [`ResponseBody`], the handler's body or the layer's own answer. Both are this crate's own
//! types, so that the bodies' building blocks (`http-body-util`) stay out of its public API.

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

/// The body of a request that reaches the handler: the verified bytes, exactly as sent, in one
/// frame. Read it like any [`http_body::Body`], or take the bytes directly. The test kit
/// (feature `test-util`) builds its requests and answers with it too.
///
/// ```
/// use http_body_util::BodyExt;
/// use sangho_webhook::WebhookBody;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let body = WebhookBody::from_static(br#"{"id":"evt_1"}"#);
/// assert_eq!(body.bytes().len(), 14);
/// assert_eq!(body.collect().await.unwrap().to_bytes(), &br#"{"id":"evt_1"}"#[..]);
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct WebhookBody {
    bytes: Option<Bytes>,
    len: u64,
}

impl WebhookBody {
    /// A body of `bytes`.
    pub fn new(bytes: Bytes) -> Self {
        let len = bytes.len() as u64;
        Self {
            bytes: (!bytes.is_empty()).then_some(bytes),
            len,
        }
    }

    /// A body of static bytes (for tests).
    pub fn from_static(bytes: &'static [u8]) -> Self {
        Self::new(Bytes::from_static(bytes))
    }

    /// The bytes not yet read (all of them, until the body is polled). Cloning them is cheap.
    pub fn bytes(&self) -> Bytes {
        self.bytes.clone().unwrap_or_default()
    }

    /// The bytes not yet read.
    pub fn into_bytes(self) -> Bytes {
        self.bytes.unwrap_or_default()
    }
}

impl From<Bytes> for WebhookBody {
    fn from(bytes: Bytes) -> Self {
        Self::new(bytes)
    }
}

impl Body for WebhookBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.bytes.take().map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(if self.bytes.is_some() { self.len } else { 0 })
    }
}

pin_project! {
    /// The response body of [`SanghoWebhook`](crate::SanghoWebhook): the handler's body, or the
    /// short JSON body of an answer the layer gave itself (a rejection or a duplicate).
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Answer { body: Full<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn answer(body: Full<Bytes>) -> Self {
        Self {
            kind: Kind::Answer { body },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProjection::Inner { body } => body.poll_frame(cx),
            KindProjection::Answer { body } => Pin::new(body)
                .poll_frame(cx)
                .map_err(|never: Infallible| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").finish_non_exhaustive()
    }
}
