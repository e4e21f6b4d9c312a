"""Qlik Replicate DT images typed by their MD version: each value converted to its declared type.

An image that holds exactly a specialised version's columns, all captured (``DeclaredVersion.fits``),
is typed by one compiled expression per column with a literal type (``Specialised``). Any other
image (a column mask that leaves columns out, a column the MD does not declare) takes the general
typing: a lambda over its captured values that looks each type up, with the same result.

Both images of a message are typed the same way: ``after`` (``_data``) and ``before`` (the
``_delete_image``). Each step is one select, because each step reads the one before several times.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

from pyspark.sql import DataFrame

from airflow_cdc_provider.formats.common.values import failed_conversions
from airflow_cdc_provider.formats.qlik.metadata import DeclaredVersion
from airflow_cdc_provider.formats.qlik.values import column_present, declared_value, value_text
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# The images of a message (name -> its column): ``after`` and the image a delete removes.
_IMAGES = {"after": "_data", "before": "_delete_image"}


class Specialised:
    """The typing of images that fit a specialised version, in steps a select each reads once."""

    def __init__(self, declared: list[DeclaredVersion]) -> None:
        self.declared = declared
        self.width = max((len(v.names) for v in declared), default=0)

    def version(self, md: Expr, image: Expr, mask: Expr) -> Expr:
        """The ``vid`` of the specialised version the image fits; null when none does."""
        return self._first(lambda v: v.fits(md, image, mask), lambda v: E.lit(v.vid), "int")

    def texts(self, vid: Expr, image: Expr) -> Expr:
        values = E.map_values(image)
        return E.when(vid.isNotNull(), E.array(*[value_text(E.get(values, i)) for i in range(self.width)]))

    def _first(
        self,
        condition: Callable[[DeclaredVersion], Expr],
        value: Callable[[DeclaredVersion], Expr],
        null: str,
    ) -> Expr:
        """``CASE`` over the specialised versions: the value of the first whose condition holds."""
        if not self.declared:
            return E.null(null)
        chosen = E.when(condition(self.declared[0]), value(self.declared[0]))
        for v in self.declared[1:]:
            chosen = chosen.when(condition(v), value(v))
        return chosen

    def _by_version(self, vid: Expr, value: Callable[[DeclaredVersion], Expr], null: str) -> Expr:
        return self._first(lambda v: vid == v.vid, value, null)

    def typed(self, vid: Expr, texts: Expr) -> Expr:
        return self._by_version(vid, lambda v: v.typed(texts), "array<variant>")

    def image(self, vid: Expr, typed: Expr) -> Expr:
        names = self._by_version(vid, lambda v: E.array(*[E.lit(n) for n in v.names]), "array<string>")
        return E.map_from_arrays(names, typed)

    def failed(self, texts: Expr, typed: Expr) -> Expr:
        """Some value's text did not convert to its declared type."""
        checks = [E.get(texts, i).isNotNull() & E.get(typed, i).isNull() for i in range(self.width)]
        return functools.reduce(operator.or_, checks) if checks else E.lit(False)


def _present(k: Expr) -> Expr:
    """Whether column ``k`` was captured: no mask, a column without an ordinal, or its bit set."""
    ordinal = E.col("_md")["columns"][k]["ordinal"]
    mask = E.col("_mask")
    return mask.isNull() | ordinal.isNull() | column_present(mask, ordinal)


def _captured(image: Expr) -> Expr:
    """The image without the columns the mask leaves out (without a mask, all: no lambda)."""
    mask = E.col("_mask")
    return E.when(mask.isNull(), image).otherwise(E.map_filter(image, lambda k, v: _present(k)))


def _general_value(k: Expr, v: Expr) -> Expr:
    """A value converted to the type the version declares for it; an undeclared column as it is."""
    t = E.col("_md")["types"][k]
    return E.when(t.isNull(), v).otherwise(declared_value(value_text(v), t))


def _with_version_ids(df: DataFrame, spec: Specialised) -> DataFrame:
    """``_<image>_vid``: the specialised version each image fits (null: the general typing)."""
    md, mask = E.col("_md"), E.col("_mask")
    return df.select(
        "*",
        *E.columns(*(spec.version(md, E.col(c), mask).alias(f"_{n}_vid") for n, c in _IMAGES.items())),
    )


def _with_texts(df: DataFrame, spec: Specialised) -> DataFrame:
    """Per image, the input of its typing: ``_<image>_texts`` (the values' text, by position) for a
    specialised version, else ``_<image>_captured`` (the captured values, by name)."""
    return df.select(
        "*",
        *E.columns(
            *(spec.texts(E.col(f"_{n}_vid"), E.col(c)).alias(f"_{n}_texts") for n, c in _IMAGES.items()),
            *(
                E.when(E.col(f"_{n}_vid").isNull(), _captured(E.col(c))).alias(f"_{n}_captured")
                for n, c in _IMAGES.items()
            ),
        ),
    )


def _with_typed_values(df: DataFrame, spec: Specialised) -> DataFrame:
    """Per image, its converted values: ``_<image>_typed`` (specialised) or ``_<image>_general``."""
    return df.select(
        "*",
        *E.columns(
            *(spec.typed(E.col(f"_{n}_vid"), E.col(f"_{n}_texts")).alias(f"_{n}_typed") for n in _IMAGES),
            *(
                E.transform_values(E.col(f"_{n}_captured"), _general_value).alias(f"_{n}_general")
                for n in _IMAGES
            ),
        ),
    )


def _image_and_failed(spec: Specialised, n: str) -> tuple[Expr, Expr]:
    """Image ``n`` as a map of typed values, and whether some value did not convert."""
    vid, texts, typed = E.col(f"_{n}_vid"), E.col(f"_{n}_texts"), E.col(f"_{n}_typed")
    general, captured = E.col(f"_{n}_general"), E.col(f"_{n}_captured")
    image = E.when(vid.isNotNull(), spec.image(vid, typed)).otherwise(general)
    failed = E.when(vid.isNotNull(), spec.failed(texts, typed)).otherwise(
        failed_conversions(E.transform_values(captured, lambda k, v: value_text(v)), general)
    )
    return image, failed


def typed_images(df: DataFrame, declared: list[DeclaredVersion]) -> DataFrame:
    """``df`` with its images typed: ``_after``, ``_before_img`` and ``_bad_value`` (a value of
    either did not convert). Reads ``_md``, ``_mask``, ``_data`` and ``_delete_image``."""
    spec = Specialised(declared)
    df = _with_typed_values(_with_texts(_with_version_ids(df, spec), spec), spec)
    after, after_failed = _image_and_failed(spec, "after")
    before, before_failed = _image_and_failed(spec, "before")
    return df.select(
        "*",
        *E.columns(
            after.alias("_after"),
            before.alias("_before_img"),
            (after_failed | before_failed).alias("_bad_value"),
        ),
    )
