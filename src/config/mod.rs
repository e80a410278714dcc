//! Configuration: flags and KubeProxyConfiguration. See issue 2.
