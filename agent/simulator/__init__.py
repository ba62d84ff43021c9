"""A synthetic job with ground truth by construction (``commpulse simulate`` and ``demo``)."""
