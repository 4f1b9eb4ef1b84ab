//! Tests of the built-in tools, each run with a scripted [`ToolIo`] that answers the client's
//! side.

use super::*;
use crate::{first_text, ToolFuture, ToolIo, ToolRegistry};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

struct Scripted {
    answers: Mutex<Vec<Value>>,
    asked: Mutex<Vec<(String, Value)>>,
    progress: Mutex<Vec<f64>>,
}

impl ToolIo for Scripted {
    fn progress(&self, p: f64, _t: Option<f64>, _m: Option<String>) {
        self.progress.lock().unwrap().push(p);
    }
    fn log(&self, _message: taskmesh_mcp::notify::LogMessage) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    fn request(&self, method: &'static str, params: Value) -> ToolFuture {
        self.asked
            .lock()
            .unwrap()
            .push((method.to_string(), params));
        let a = self.answers.lock().unwrap().remove(0);
        async move { Ok(a) }.boxed()
    }
}

fn ctx(answers: Vec<Value>) -> (ToolContext, Arc<Scripted>) {
    let io = Arc::new(Scripted {
        answers: Mutex::new(answers),
        asked: Mutex::new(vec![]),
        progress: Mutex::new(vec![]),
    });
    (
        ToolContext {
            cancel: CancellationToken::new(),
            ended: CancellationToken::new(),
            io: io.clone(),
            has_progress_token: true,
            client_elicitation: true,
            client_sampling: true,
            principal: "alice".into(),
            upstream_task: None,
            answers: Arc::default(),
            traceparent: None,
        },
        io,
    )
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn greet_and_validation() {
    let r = ToolRegistry::with_builtins();
    let g = r.get("greet").unwrap();
    let (c, _) = ctx(vec![]);
    let out = g.call(obj(json!({"name":"Ada"})), c).await.unwrap();
    assert_eq!(first_text(&out), Some("Hello, Ada!"));
    assert!(g
        .validate(&obj(json!({"name": 3})))
        .unwrap_err()
        .message
        .contains("name"));
    let s = r.get("slow_compute").unwrap();
    assert!(s
        .validate(&obj(json!({"seconds": "x"})))
        .unwrap_err()
        .message
        .contains("seconds"));
    assert!(s.validate(&obj(json!({"seconds": -1}))).is_err());
    assert!(s
        .validate(&obj(json!({"seconds": 1, "label": 2})))
        .unwrap_err()
        .message
        .contains("label"));
    assert!(r
        .get("failing_job")
        .unwrap()
        .validate(&obj(json!({"x":1})))
        .is_err());
}

#[tokio::test(start_paused = true)]
async fn slow_compute_reports_progress_and_stops_when_cancelled() {
    let t = slow_compute();
    let (c, io) = ctx(vec![]);
    let out = t
        .call(obj(json!({"seconds": 3, "label": "L"})), c)
        .await
        .unwrap();
    assert!(first_text(&out).unwrap().contains("L"));
    assert_eq!(*io.progress.lock().unwrap(), vec![1.0, 2.0, 3.0]);

    let (c, _) = ctx(vec![]);
    let cancel = c.cancel.clone();
    let run = tokio::spawn(t.call(obj(json!({"seconds": 100})), c));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cancel.cancel();
    assert!(run.await.unwrap().is_err());
}

#[tokio::test]
async fn confirm_delete_and_multi_input_and_ask_model() {
    let (c, io) = ctx(vec![json!({"action":"accept","content":{"confirm":true}})]);
    let out = confirm_delete()
        .call(obj(json!({"filename":"a.txt"})), c)
        .await
        .unwrap();
    assert_eq!(first_text(&out), Some("Deleted a.txt"));
    assert_eq!(io.asked.lock().unwrap()[0].0, "elicitation/create");
    assert_eq!(
        *io.progress.lock().unwrap(),
        vec![1.0],
        "progress once answered"
    );

    let (c, _) = ctx(vec![json!({"action":"decline"})]);
    let out = confirm_delete()
        .call(obj(json!({"filename":"a.txt"})), c)
        .await
        .unwrap();
    assert!(first_text(&out).unwrap().starts_with("Kept"));

    let (c, io) = ctx(vec![
        json!({"action":"accept","content":{"name":"Ada"}}),
        json!({"action":"accept","content":{"colour":"green"}}),
    ]);
    let out = multi_input().call(obj(json!({})), c).await.unwrap();
    assert_eq!(first_text(&out), Some("Ada likes green"));
    assert_eq!(io.asked.lock().unwrap().len(), 2);

    let (c, _) = ctx(vec![
        json!({"role":"assistant","content":{"type":"text","text":"42"},"model":"m"}),
    ]);
    let out = ask_model()
        .call(obj(json!({"prompt":"q"})), c)
        .await
        .unwrap();
    assert_eq!(first_text(&out), Some("The model said: 42"));
}

#[tokio::test]
async fn failing_tools() {
    let (c, _) = ctx(vec![]);
    let out = failing_job().call(obj(json!({})), c).await.unwrap();
    assert_eq!(out["isError"], json!(true));
    let (c, _) = ctx(vec![]);
    let e = protocol_error_job()
        .call(obj(json!({})), c)
        .await
        .unwrap_err();
    assert_eq!(e.code, -32603);
}
