r"""Grouped data: a sampler that draws one example from each requested group.

Example:
    >>> import torch
    >>> X, y = torch.arange(12.0).reshape(6, 2), torch.zeros(6)
    >>> g = torch.tensor([0, 0, 1, 1, 2, 2])
    >>> s = GroupSampler(X, y, g, generator=torch.Generator().manual_seed(0))
    >>> b = s.sample(torch.tensor([0, 2]))
    >>> b.group.tolist(), b.X.shape
    ([0, 2], torch.Size([2, 2]))
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["Batch", "GroupSampler"]


class Batch(NamedTuple):
    """One round's samples: features, labels and the group each row was drawn from."""

    X: Tensor
    y: Tensor
    group: Tensor


class GroupSampler:
    r"""Draws samples i.i.d. (with replacement) from the empirical distribution of each group.

    Group :math:`i`'s distribution :math:`P_i` is uniform over the rows with ``groups == i``,
    so its risk is :math:`R_i(\theta) = \frac{1}{n_i}\sum_{k: g_k = i} \ell(\theta; x_k, y_k)`.

    Args:
        dataset_X: features, shape ``(n, ...)``.
        dataset_y: labels, shape ``(n, ...)``.
        groups: group labels in ``{0, ..., n_groups - 1}``, shape ``(n,)``, integer dtype.
        generator: the random source (determinism under a seed).
        n_groups: the number of groups ``m`` (default ``groups.max() + 1``); every group must
            have at least one row.

    Raises:
        ValueError: on mismatched lengths, non-integer or out-of-range labels, or an empty group.
    """

    def __init__(
        self,
        dataset_X: Tensor,
        dataset_y: Tensor,
        groups: Tensor,
        generator: torch.Generator | None = None,
        n_groups: int | None = None,
    ) -> None:
        groups = torch.as_tensor(groups)
        if groups.ndim != 1:
            raise ValueError(
                f"groups must be a 1-D tensor of labels, got shape {tuple(groups.shape)}"
            )
        if groups.is_floating_point() or groups.is_complex() or groups.dtype == torch.bool:
            raise ValueError(f"group labels must be integers, got dtype {groups.dtype}")
        n = groups.numel()
        if n == 0:
            raise ValueError("the data set is empty")
        if dataset_X.shape[0] != n or dataset_y.shape[0] != n:
            raise ValueError(
                f"X, y and groups must have the same length, got {dataset_X.shape[0]}, "
                f"{dataset_y.shape[0]}, {n}"
            )
        m = int(groups.max()) + 1 if n_groups is None else int(n_groups)
        if m < 1:
            raise ValueError(f"n_groups must be >= 1, got {n_groups!r}")
        if int(groups.min()) < 0 or int(groups.max()) >= m:
            raise ValueError(
                f"group labels must lie in [0, {m - 1}], got range "
                f"[{int(groups.min())}, {int(groups.max())}]"
            )
        counts = torch.bincount(groups.long(), minlength=m)
        empty = torch.nonzero(counts == 0).flatten().tolist()
        if empty:
            raise ValueError(f"every group needs at least one sample; empty groups: {empty}")
        self.X, self.y, self.groups = dataset_X, dataset_y, groups.long()
        self.n_groups = m
        self.generator = generator
        order = torch.argsort(self.groups, stable=True)
        self._members = list(torch.split(order, counts.tolist()))
        self.counts = counts

    def members(self, i: int) -> Tensor:
        """Row indices of group ``i``."""
        return self._members[i]

    def sample(self, group_ids: Tensor) -> Batch:
        """One sample from each listed group (a group may be listed more than once).

        Args:
            group_ids: integer tensor of group labels in ``[0, m)``.

        Returns:
            A :class:`Batch` whose row ``k`` comes from group ``group_ids[k]``.
        """
        ids = torch.as_tensor(group_ids).long().flatten()
        if ids.numel() == 0:
            raise ValueError("sample needs at least one group")
        if int(ids.min()) < 0 or int(ids.max()) >= self.n_groups:
            raise ValueError(f"group ids must lie in [0, {self.n_groups - 1}], got {ids.tolist()}")
        u = torch.rand(ids.numel(), generator=self.generator, dtype=torch.float64)
        rows = []
        for k, i in enumerate(ids.tolist()):
            members = self._members[i]
            j = min(int(u[k] * members.numel()), members.numel() - 1)
            rows.append(members[j])
        idx = torch.stack(rows)
        return Batch(self.X[idx], self.y[idx], ids)
