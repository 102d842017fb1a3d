"""Linearised plant models for controller design (LQR, MPC): A, B, C, D from the exact Jacobians."""
