//! Nodes that show their ServiceAccount token instead of a client
//! certificate: the API server's TokenReview says whose token it is and,
//! for a token bound to a Pod, which node that Pod runs on. A node may
//! watch the view of that node only.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus,
};
use kube::{api::PostParams, Api, Client};

use super::limits::{RateLimit, TOKEN_REVIEWS_PER_SECOND, TOKEN_REVIEW_BURST};

/// The extra a Pod-bound ServiceAccount token's review carries: the name
/// of the node the Pod is on.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// How long a review's answer is reused: a node reconnecting in a loop
/// must not become a loop of TokenReviews.
const REMEMBERED: Duration = Duration::from_secs(60);

/// Who may watch: the ServiceAccount the nodes' proxies run as, and the
/// audience their tokens are made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPolicy {
    /// `system:serviceaccount:NAMESPACE:NAME`.
    pub username: String,
    pub audience: String,
}

impl TokenPolicy {
    /// `namespace/name` of the ServiceAccount.
    pub fn new(service_account: &str, audience: &str) -> Result<Self, String> {
        let (namespace, name) = service_account
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or_else(|| {
                format!("{service_account}: expected NAMESPACE/NAME")
            })?;
        Ok(Self {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            audience: audience.to_owned(),
        })
    }

    /// The node a review lets its token watch, or why none.
    pub fn node_of(
        &self,
        status: &TokenReviewStatus,
    ) -> Result<String, String> {
        if status.authenticated != Some(true) {
            return Err(match &status.error {
                Some(error) if !error.is_empty() => {
                    format!("token not authenticated: {error}")
                }
                _ => "token not authenticated".to_owned(),
            });
        }
        if let Some(audiences) = &status.audiences {
            if !audiences.contains(&self.audience) {
                return Err(format!(
                    "token not made for audience {}",
                    self.audience
                ));
            }
        }
        let user = status.user.as_ref();
        let username = user.and_then(|u| u.username.as_deref()).unwrap_or("");
        if username != self.username {
            return Err(format!("{username} is not {}", self.username));
        }
        let nodes = user
            .and_then(|u| u.extra.as_ref())
            .and_then(|extra| extra.get(NODE_NAME_EXTRA));
        match nodes.map(Vec::as_slice) {
            Some([node]) if !node.is_empty() => Ok(node.clone()),
            _ => Err("the token is not bound to a Pod on a node".to_owned()),
        }
    }
}

/// Per token: when it was reviewed, and the node it may watch or why
/// none.
type Answers = HashMap<String, (Instant, Result<String, String>)>;

/// Why a token gets no view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRefusal {
    /// The review says no.
    Refused(String),
    /// No review could be had now (the API server failed, or the reviews
    /// of the last moments were spent): try again later.
    Busy(String),
}

/// Reviews tokens with the API server, remembering answers a while and
/// asking for at most a bounded number of reviews a second.
pub struct TokenReviewer {
    client: Client,
    policy: TokenPolicy,
    remembered: Mutex<Answers>,
    reviews: Mutex<RateLimit>,
}

impl std::fmt::Debug for TokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewer")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl TokenReviewer {
    pub fn new(client: Client, policy: TokenPolicy) -> Self {
        Self {
            client,
            policy,
            remembered: Mutex::new(HashMap::new()),
            reviews: Mutex::new(RateLimit::new(
                TOKEN_REVIEWS_PER_SECOND,
                TOKEN_REVIEW_BURST,
            )),
        }
    }

    /// The node `token` may watch, or why none.
    pub async fn node_of(&self, token: &str) -> Result<String, TokenRefusal> {
        let now = Instant::now();
        if let Some((at, answer)) = self.lock().get(token) {
            if now.duration_since(*at) < REMEMBERED {
                return answer.clone().map_err(TokenRefusal::Refused);
            }
        }
        let allowed = self
            .reviews
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_take(now);
        if !allowed {
            return Err(TokenRefusal::Busy(
                "too many token reviews at once; try again".to_owned(),
            ));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![self.policy.audience.clone()]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            // The API server could not say: not remembered, so the next
            // attempt asks again.
            .map_err(|e| {
                TokenRefusal::Busy(format!("TokenReview failed: {e}"))
            })?;
        let answer = self.policy.node_of(&reviewed.status.unwrap_or_default());
        let mut remembered = self.lock();
        remembered.retain(|_, (at, _)| now.duration_since(*at) < REMEMBERED);
        remembered.insert(token.to_owned(), (now, answer.clone()));
        answer.map_err(TokenRefusal::Refused)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::authentication::v1::UserInfo;

    use super::*;

    fn status(
        username: &str,
        nodes: &[&str],
        audiences: Option<&[&str]>,
    ) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: audiences
                .map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
            user: Some(UserInfo {
                username: Some(username.to_owned()),
                extra: Some(
                    [(
                        NODE_NAME_EXTRA.to_owned(),
                        nodes.iter().map(|s| (*s).to_owned()).collect(),
                    )]
                    .into(),
                ),
                ..UserInfo::default()
            }),
            error: None,
        }
    }

    #[test]
    fn a_review_allows_the_node_of_the_proxy_s_pod_only() {
        let policy =
            TokenPolicy::new("kube-system/kube-ipvs-proxy", "kube-ipvs-proxy")
                .unwrap();
        let proxy = "system:serviceaccount:kube-system:kube-ipvs-proxy";
        assert_eq!(
            policy.node_of(&status(
                proxy,
                &["node-a"],
                Some(&["kube-ipvs-proxy"])
            )),
            Ok("node-a".to_owned())
        );
        let refused = [
            status("system:serviceaccount:default:other", &["node-a"], None),
            status(proxy, &[], None),
            status(proxy, &["node-a", "node-b"], None),
            status(
                proxy,
                &["node-a"],
                Some(&["https://kubernetes.default.svc"]),
            ),
            TokenReviewStatus {
                authenticated: Some(false),
                error: Some("token expired".to_owned()),
                ..TokenReviewStatus::default()
            },
        ];
        for status in refused {
            assert!(policy.node_of(&status).is_err(), "{status:?}");
        }
        assert!(TokenPolicy::new("kube-ipvs-proxy", "a").is_err());
    }

    /// A flood of distinct bogus tokens costs the API server a bounded
    /// number of reviews; the rest are told to come back, a repeated
    /// token is answered from memory, and an honest node's token still
    /// gets its node once the moment has passed.
    #[tokio::test]
    async fn a_flood_of_bogus_tokens_is_reviewed_at_a_bounded_rate() {
        use std::sync::{
            atomic::{AtomicUsize, Ordering},
            Arc,
        };

        use axum::{routing::post, Json, Router};

        use crate::apiside::limits::{
            TOKEN_REVIEWS_PER_SECOND, TOKEN_REVIEW_BURST,
        };

        let reviews = Arc::new(AtomicUsize::new(0));
        let counted = reviews.clone();
        let proxy = "system:serviceaccount:kube-system:kube-ipvs-proxy";
        let app = Router::new().route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(move |Json(mut review): Json<TokenReview>| {
                counted.fetch_add(1, Ordering::SeqCst);
                let honest = review.spec.token == "honest";
                review.status = Some(match honest {
                    true => {
                        status(proxy, &["node-a"], Some(&["kube-ipvs-proxy"]))
                    }
                    false => TokenReviewStatus {
                        authenticated: Some(false),
                        ..TokenReviewStatus::default()
                    },
                });
                async move { Json(review) }
            }),
        );
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client =
            Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let reviewer = TokenReviewer::new(
            client,
            TokenPolicy::new("kube-system/kube-ipvs-proxy", "kube-ipvs-proxy")
                .unwrap(),
        );

        let started = Instant::now();
        let mut busy = 0;
        for i in 0..400 {
            match reviewer.node_of(&format!("bogus-{i}")).await {
                Err(TokenRefusal::Busy(_)) => busy += 1,
                Err(TokenRefusal::Refused(_)) => {}
                Ok(node) => panic!("a bogus token watches {node}"),
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let asked = reviews.load(Ordering::SeqCst);
        let allowed =
            TOKEN_REVIEW_BURST + elapsed * TOKEN_REVIEWS_PER_SECOND + 1.0;
        assert!(
            (asked as f64) <= allowed,
            "{asked} reviews in {elapsed:.2} s (allowed {allowed:.0})"
        );
        assert_eq!(asked + busy, 400, "every token reviewed or told to wait");
        assert!(busy > 0, "the flood was not limited");

        // A token refused a moment ago is refused from memory.
        let before = reviews.load(Ordering::SeqCst);
        assert!(matches!(
            reviewer.node_of("bogus-0").await,
            Err(TokenRefusal::Refused(_))
        ));
        assert_eq!(reviews.load(Ordering::SeqCst), before);

        // The honest node gets through once the bucket refills.
        tokio::time::sleep(Duration::from_millis(
            (1000.0 / TOKEN_REVIEWS_PER_SECOND) as u64 + 50,
        ))
        .await;
        assert_eq!(reviewer.node_of("honest").await, Ok("node-a".to_owned()));
    }
}
