"""Lab Streaming Layer transport: the driver, the controller's inlet and the arm's streams."""
