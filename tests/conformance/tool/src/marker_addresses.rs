//! The marker Service's addresses: the marker writes them, and a
//! snapshot leaves them out (they change at every step by design).

use std::net::{Ipv4Addr, Ipv6Addr};

pub const VIP4: Ipv4Addr = Ipv4Addr::new(198, 18, 255, 254);
pub const VIP6: Ipv6Addr =
    Ipv6Addr::new(0x2001, 0xdb8, 0x42, 0, 0, 0, 0, 0xfffe);
pub const REAL4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);
pub const REAL6: Ipv6Addr =
    Ipv6Addr::new(0x2001, 0xdb8, 0x19, 0x255, 0, 0, 0, 0xfe);
