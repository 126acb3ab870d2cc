from django.db import models


class FeedbackValue(models.TextChoices):
    """What an application may report about one response: a person's thumbs, or the outcome the
    application observed (the task the answer was for succeeded or failed)."""

    UP = "up", "Thumbs up"
    DOWN = "down", "Thumbs down"
    SUCCESS = "success", "Outcome: success"
    FAILURE = "failure", "Outcome: failure"


POSITIVE_FEEDBACK = frozenset({FeedbackValue.UP, FeedbackValue.SUCCESS})


class VerdictDecision(models.TextChoices):
    CONTINUE = "continue", "Continue"
    PROMOTE = "promote", "Promote"
    HOLD = "hold", "Hold for a human"
    ROLLBACK = "rollback", "Roll back"
