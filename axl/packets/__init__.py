"""The IPv6 packet device between the local TCP stack and the overlay."""
