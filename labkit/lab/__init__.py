"""What exists only to teach or measure: the ticket service, the lock measurements, the races."""
