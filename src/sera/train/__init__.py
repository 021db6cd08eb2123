"""Training: losses, the stage schedule, datums and the learner loop."""
