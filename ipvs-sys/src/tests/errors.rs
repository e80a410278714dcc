//! Error classification and messages.

use std::num::NonZeroI32;

use netlink_packet_core::ErrorMessage;

use crate::{Error, Operation};

fn kernel(errno: i32, operation: Operation, object: &str) -> Error {
    let mut message = ErrorMessage::default();
    // The kernel sends negative errno values.
    message.code = NonZeroI32::new(-errno);
    Error::kernel(operation, object, message)
}

#[test]
fn kernel_errors_are_classified_by_errno() {
    struct Row {
        errno: i32,
        exists: bool,
        not_found: bool,
        invalid: bool,
        label: &'static str,
    }
    let rows = [
        Row {
            errno: 17,
            exists: true,
            not_found: false,
            invalid: false,
            label: "exists",
        },
        Row {
            errno: 3,
            exists: false,
            not_found: true,
            invalid: false,
            label: "not_found",
        },
        Row {
            errno: 2,
            exists: false,
            not_found: true,
            invalid: false,
            label: "not_found",
        },
        Row {
            errno: 22,
            exists: false,
            not_found: false,
            invalid: true,
            label: "invalid",
        },
        Row {
            errno: 1,
            exists: false,
            not_found: false,
            invalid: false,
            label: "kernel",
        },
    ];
    for row in rows {
        let err =
            kernel(row.errno, Operation::AddService, "TCP 198.18.0.10:80");
        assert_eq!(err.errno(), Some(row.errno));
        assert_eq!(err.is_exists(), row.exists, "errno {}", row.errno);
        assert_eq!(err.is_not_found(), row.not_found, "errno {}", row.errno);
        assert_eq!(err.is_invalid(), row.invalid, "errno {}", row.errno);
        assert_eq!(err.metric_label(), row.label, "errno {}", row.errno);
        assert_eq!(err.operation(), Some(Operation::AddService));
    }
}

#[test]
fn kernel_error_message_names_operation_object_and_errno() {
    let err = kernel(
        17,
        Operation::AddDest,
        "198.19.0.5:8080 in TCP 198.18.0.10:80",
    );
    let text = err.to_string();
    assert!(
        text.starts_with("add_dest 198.19.0.5:8080 in TCP 198.18.0.10:80: "),
        "{text}"
    );
    assert!(text.contains("EEXIST"), "{text}");
    assert!(text.contains("os error 17"), "{text}");
}

#[test]
fn unavailable_is_its_own_kind() {
    let err = Error::IpvsUnavailable;
    assert_eq!(err.errno(), None);
    assert!(!err.is_not_found());
    assert_eq!(err.metric_label(), "ipvs_unavailable");
    assert!(err.to_string().contains("ip_vs module"));
}
